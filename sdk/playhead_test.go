package sdk

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/sdk/wire"
)

// held is a message of kind k whose sender's playhead was at (unix ms); its
// id is stamped 3 s later, when the ingest took it.
func held(at int64, n uint64, k Kind) Message {
	return Message{ID: wire.FormatID(at+3000, n), Kind: k, Playhead: at, Text: "x"}
}

func idsOf(ms []Message) []string { return ids(ms) }

func TestHoldReleasesAtThePlayhead(t *testing.T) {
	var q holdQueue
	const P = 1_700_000_000_000
	q.push(held(P+500, 1, KindBarrage))
	q.push(held(P, 2, KindBarrage))
	q.push(held(P+200, 3, KindGift))
	local := int64(10_000)
	if out := q.release(P-1, true, true, local); len(out) != 0 {
		t.Fatalf("released before its moment: %v", idsOf(out))
	}
	if out := q.release(P, true, true, local); len(out) != 1 || out[0].Playhead != P {
		t.Fatalf("at P released %+v, want the message of P", out)
	}
	if out := q.release(P+210, true, true, local+210); len(out) != 1 || out[0].Playhead != P+200 {
		t.Fatalf("at P+210 released %+v, want the gift of P+200", out)
	}
	if out := q.release(P+499, true, true, local+500); len(out) != 0 {
		t.Fatalf("released early: %v", idsOf(out))
	}
	if out := q.release(P+520, true, true, local+521); len(out) != 1 || out[0].Playhead != P+500 {
		t.Fatalf("at P+520 released %+v", out)
	}
	if q.late != 0 || q.held != 3 || q.jumps != 0 {
		t.Errorf("late %d held %d jumps %d, want 0 3 0", q.late, q.held, q.jumps)
	}
	if p99 := skewQuantile(q.skew, 0.99); p99 > 50 {
		t.Errorf("skew p99 %d ms, want ≤ 50", p99)
	}
}

// A message whose moment has passed when it arrives (its sender was further
// behind than this viewer) is shown at once and counted late.
func TestHoldLate(t *testing.T) {
	var q holdQueue
	const P = 1_700_000_000_000
	q.release(P, true, true, 0)
	q.push(held(P-2000, 1, KindBarrage))
	out := q.release(P+10, true, true, 10)
	if len(out) != 1 {
		t.Fatalf("a late message was not shown at once: %d", len(out))
	}
	if q.late != 1 || skewQuantile(q.skew, 0.5) != 5000 {
		t.Errorf("late %d, skew p50 %d: want 1 and the 2-5 s bucket", q.late, skewQuantile(q.skew, 0.5))
	}
}

// A message without a playhead (an old client) is placed at its id's time.
func TestHoldOldClientAtItsIDTime(t *testing.T) {
	var q holdQueue
	const T = 1_700_000_000_000
	q.push(Message{ID: wire.FormatID(T, 0), Kind: KindBarrage})
	if out := q.release(T-1, true, true, 0); len(out) != 0 {
		t.Fatal("a message without a playhead was shown before its id's time")
	}
	if out := q.release(T, true, true, 1); len(out) != 1 {
		t.Fatal("a message without a playhead was not shown at its id's time")
	}
}

// A seek forward shows what is due, but not the barrage it jumped over;
// gifts and system messages are always shown.
func TestHoldSeekForward(t *testing.T) {
	var q holdQueue
	const P = 1_700_000_000_000
	q.release(P, true, true, 0)
	q.push(held(P+1000, 1, KindBarrage)) // jumped over
	q.push(held(P+2000, 2, KindGift))    // jumped over, shown
	q.push(held(P+59_000, 3, KindBarrage))
	q.push(held(P+61_000, 4, KindBarrage)) // still ahead
	out := q.release(P+60_000, true, true, 100)
	if len(out) != 2 || out[0].Kind != KindGift || out[1].Playhead != P+59_000 {
		t.Fatalf("after a seek forward released %+v", out)
	}
	if q.jumps != 1 || q.skipped != 1 {
		t.Errorf("jumps %d skipped %d, want 1 1", q.jumps, q.skipped)
	}
	if out := q.release(P+61_000, true, true, 1100); len(out) != 1 {
		t.Fatalf("the message ahead of the seek: %+v", out)
	}
}

// A seek back shows nothing again and holds what is now ahead of the
// playhead until it is reached again; a stall (the playhead stops, the
// local clock goes on) holds everything.
func TestHoldSeekBackAndStall(t *testing.T) {
	var q holdQueue
	const P = 1_700_000_000_000
	q.release(P, true, true, 0)
	q.push(held(P+1000, 1, KindBarrage))
	// Seek back by 30 s.
	if out := q.release(P-30_000, true, true, 10); len(out) != 0 {
		t.Fatalf("a seek back released %v", idsOf(out))
	}
	if q.jumps != 1 {
		t.Errorf("jumps %d, want 1", q.jumps)
	}
	// The video plays on from there and reaches the message again.
	if out := q.release(P+1000, true, true, 31_010); len(out) != 1 {
		t.Fatal("the message was not shown when the playhead reached it again")
	}
	// A stall: the playhead stays at P+1500 for 5 s of local time.
	q.push(held(P+2000, 2, KindBarrage))
	for local := int64(31_500); local <= 36_500; local += 500 {
		if out := q.release(P+1500, true, true, local); len(out) != 0 {
			t.Fatalf("shown during a stall: %v", idsOf(out))
		}
	}
	if out := q.release(P+2000, true, true, 37_000); len(out) != 1 {
		t.Fatal("not shown once the stalled video played on")
	}
}

// Without a playhead (the player lost it) or without sync from the entry,
// the hold is wall-clock mode: everything held is shown at once.
func TestHoldFallback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ok, sync bool
	}{{"no playhead", false, true}, {"sync off", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var q holdQueue
			const P = 1_700_000_000_000
			q.push(held(P+10_000, 1, KindBarrage))
			q.push(held(P+20_000, 2, KindSystem))
			if out := q.release(P, tc.ok, tc.sync, 0); len(out) != 2 {
				t.Fatalf("fallback released %d, want 2", len(out))
			}
			q.release(P, tc.ok, tc.sync, 10)
			if q.fallbacks != 1 {
				t.Errorf("fallbacks %d, want 1 (one switch)", q.fallbacks)
			}
			// The clock comes back: holding again.
			q.push(held(P+10_000, 3, KindBarrage))
			if out := q.release(P, true, true, 20); len(out) != 0 {
				t.Fatal("not holding once the playhead came back")
			}
		})
	}
}

// The held barrage is bounded; beyond, the earliest is shown early, and
// gifts are never dropped.
func TestHoldBound(t *testing.T) {
	var q holdQueue
	const P = 1_700_000_000_000
	var early int
	for i := 0; i < holdMaxBarrage+10; i++ {
		early += len(q.push(held(P+int64(i), uint64(i), KindBarrage)))
	}
	if early != 10 || q.barrage != holdMaxBarrage || q.early != 10 {
		t.Fatalf("early %d, held barrage %d, counted %d", early, q.barrage, q.early)
	}
	q.push(held(P-1, 0, KindGift))
	if got := len(q.release(P+int64(holdMaxBarrage+10), true, true, 0)); got != holdMaxBarrage+1 {
		t.Errorf("released %d, want every held message", got)
	}
}

// The client holds a message until the app's playhead reaches the sender's,
// sends its own playhead with a comment, and — behind live — starts
// polling at its playhead, walking up to live without jumping.
func TestClientPlayheadSync(t *testing.T) {
	w := newWorld(t)
	w.entrySync = true
	live := w.serverNow().UnixMilli()
	var ph atomic.Int64
	ph.Store(live - 15_000) // the viewer's video is 15 s behind live
	c := w.newClient(func(cfg *Config) {
		cfg.NoEdge = true
		cfg.Playhead = func() (int64, bool) { return ph.Load(), true }
	})
	sec := w.serverSecond()
	// A comment sent 3 s behind live, stored now.
	P := live - 3000
	w.putSegment(sec+1, w.seqOf(sec+1), Message{ID: wire.FormatID((sec+1)*1000+10, 0), Kind: KindBarrage, Text: "goal", Playhead: P})
	w.run()
	eventually(t, "the comment held", func() bool { return c.Playhead().Held >= 1 })
	// It started at its playhead less the jump margin, not at live.
	w.lock(func() {
		if len(w.requests) == 0 || w.requests[0].second > (live-17_000)/1000 {
			t.Errorf("first segment fetched %+v, want the one at the playhead less 2 s, %d", w.requests[:min(1, len(w.requests))], (live-17_000)/1000)
		}
	})
	select {
	case m := <-c.Messages():
		t.Fatalf("shown at playhead %d, before its moment %d: %+v", ph.Load(), P, m)
	default:
	}
	ph.Store(P)
	got := receive(t, c, 1)
	if got[0].Text != "goal" {
		t.Fatalf("got %+v", got[0])
	}
	if st := c.Playhead(); st.Late != 0 || st.Jumps == 0 && st.Held != 1 {
		t.Errorf("stats %+v", st)
	}
	if c.Stats().JumpsToLive != 0 {
		t.Errorf("the poller jumped to live while walking up from the playhead")
	}
	// Its own comment carries its playhead.
	ph.Store(live - 14_000)
	if err := c.Send(context.Background(), "wow"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the post", func() bool {
		n := 0
		w.lock(func() { n = len(w.posts) })
		return n == 1
	})
	w.lock(func() {
		if w.posts[0].playhead != live-14_000 {
			t.Errorf("posted playhead %d, want %d", w.posts[0].playhead, live-14_000)
		}
	})
}

// Without sync in the entry (an old gslb, or one steering this protocol
// back) a playhead clock changes nothing: messages are shown at once.
func TestClientPlayheadSyncOff(t *testing.T) {
	w := newWorld(t)
	live := w.serverNow().UnixMilli()
	c := w.newClient(func(cfg *Config) {
		cfg.NoEdge = true
		cfg.Playhead = func() (int64, bool) { return live - 60_000, true }
	})
	sec := w.serverSecond()
	w.putSegment(sec, w.seqOf(sec), Message{ID: wire.FormatID(sec*1000+600, 0), Kind: KindBarrage, Text: "now", Playhead: live})
	w.run()
	if got := receive(t, c, 1); got[0].Text != "now" {
		t.Fatalf("got %+v", got[0])
	}
	if c.Playhead().Fallbacks == 0 {
		t.Error("wall-clock mode not counted")
	}
	_ = time.Second
}

// A takedown of a message still held removes it unseen; of one already
// shown, its notice goes to the app at once.
func TestHoldTakedown(t *testing.T) {
	var q holdQueue
	const P = 1_700_000_000_000
	held1, held2 := held(P+1000, 1, KindBarrage), held(P+2000, 2, KindBarrage)
	q.push(held1)
	q.push(held2)
	if out := q.push(takedownNotice(TakenDown{ID: held1.ID, Kind: KindBarrage})); len(out) != 0 {
		t.Fatalf("the takedown of a held message reached the app: %+v", out)
	}
	if out := q.release(P+5000, true, true, 0); len(out) != 1 || out[0].ID != held2.ID {
		t.Fatalf("released %+v, want only the message not taken down", out)
	}
	notice := takedownNotice(TakenDown{ID: held2.ID, Kind: KindBarrage})
	if out := q.push(notice); len(out) != 1 || out[0].Kind != KindTakedown {
		t.Fatalf("the takedown of a shown message: %+v, want its notice at once", out)
	}
}
