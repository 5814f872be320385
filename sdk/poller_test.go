package sdk

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/sdk/wire"
)

// The poller starts at the second the client joined in, delivers segments in
// second order and each segment's messages in the order listed, and never
// asks for a second before it is due.
func TestPollOrderAndNeverEarly(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	w.putSegment(s0, w.seqOf(s0),
		msgAt(s0, 900, 0, KindBarrage, "a"), // listed first though its id is later
		msgAt(s0, 100, 0, KindBarrage, "b"))
	w.putSegment(s0+1, w.seqOf(s0+1), msgAt(s0+1, 5, 0, KindBarrage, "c"))
	w.putSegment(s0+3, w.seqOf(s0+3),
		msgAt(s0+3, 1, 0, KindBarrage, "d"),
		msgAt(s0+3, 1, 1, KindGift, "e"))
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()

	got := receive(t, c, 5)
	var texts []string
	for _, m := range got {
		texts = append(texts, m.Text)
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(texts, want) {
		t.Errorf("order = %v, want %v", texts, want)
	}
	quiet(t, w, c, 2)
	w.noEarly()
	w.lock(func() {
		if w.requests[0].second != s0 {
			t.Errorf("first request for second %d, want the join second %d", w.requests[0].second, s0)
		}
		for i := 1; i < len(w.requests); i++ {
			if w.requests[i].second < w.requests[i-1].second {
				t.Errorf("second %d requested after %d", w.requests[i].second, w.requests[i-1].second)
			}
		}
	})
	if st := c.Stats(); st.SeqGaps != 0 || st.DecodeErrors != 0 || st.JumpsToLive != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// A due second that is not yet written answers 404; the poller asks again
// after PollRetry (in server time) and goes on once it is there.
func TestPoll404ThenSuccess(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	w.lock(func() { w.hold[s0+1] = 3 })
	w.putSegment(s0+1, w.seqOf(s0+1), msgAt(s0+1, 0, 0, KindBarrage, "late"))
	w.putSegment(s0+2, w.seqOf(s0+2), msgAt(s0+2, 0, 0, KindBarrage, "next"))
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()

	got := receive(t, c, 2)
	if got[0].Text != "late" || got[1].Text != "next" {
		t.Errorf("got %v", got)
	}
	w.noEarly()
	if st := c.Stats(); st.NotFoundRetries < 3 || st.SeqGaps != 0 {
		t.Errorf("stats = %+v", st)
	}
	w.lock(func() {
		var at []time.Time
		for _, r := range w.requests {
			if r.second == s0+1 {
				at = append(at, r.at)
			}
		}
		if len(at) != 4 {
			t.Fatalf("second %d requested %d times, want 4", s0+1, len(at))
		}
		for i := 1; i < len(at); i++ {
			if d := at[i].Sub(at[i-1]); d < defaultPollRetry {
				t.Errorf("retry %d came %v after the previous one (server time), want ≥ %v", i, d, defaultPollRetry)
			}
		}
	})
}

func TestPollSeqGapCounted(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	w.putSegment(s0, w.seqOf(s0))
	w.putSegment(s0+1, w.seqOf(s0+1)+1) // one seq lost between s0 and s0+1
	w.putSegment(s0+2, w.seqOf(s0+2)+1, msgAt(s0+2, 0, 0, KindBarrage, "x"))
	w.putSegment(s0+3, w.seqOf(s0+3)) // back to the autoEmpty numbering: a second gap
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()

	receive(t, c, 1)
	quiet(t, w, c, 2)
	if st := c.Stats(); st.SeqGaps != 2 {
		t.Errorf("SeqGaps = %d, want 2", st.SeqGaps)
	}
	w.noEarly()
}

// A segment that does not decode, or is another room's, is counted and
// skipped; the seq it used up is not counted as a gap.
func TestPollDecodeErrorSkipped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	w.lock(func() {
		w.segments[s0+1] = []byte("\xde\xad\xbe\xef not msgpack")
		w.segments[s0+3] = encodeSeg(t, segmentOf("other", s0+3, w.seqOf(s0+3)))
	})
	w.putSegment(s0+2, w.seqOf(s0+2), msgAt(s0+2, 0, 0, KindBarrage, "after"))
	w.putSegment(s0+4, w.seqOf(s0+4), msgAt(s0+4, 0, 0, KindBarrage, "after2"))
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()

	got := receive(t, c, 2)
	if got[0].Text != "after" || got[1].Text != "after2" {
		t.Errorf("got %v", got)
	}
	if st := c.Stats(); st.DecodeErrors != 2 || st.SeqGaps != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// A client far behind live (here: its clock jumps, as when a phone wakes)
// jumps to the second the manifest names and counts what it skipped.
func TestPollJumpToLive(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	w.putSegment(s0, w.seqOf(s0), msgAt(s0, 0, 0, KindBarrage, "first"))
	for s := s0 + 1; s < s0+60; s++ {
		w.putSegment(s, w.seqOf(s), msgAt(s, 0, 0, KindBarrage, "s"))
	}
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()
	if got := receive(t, c, 1); got[0].Text != "first" {
		t.Fatalf("got %v", got)
	}
	// Freeze time, then jump 30 s: the poller is waiting for s0+1 and
	// finds it (and 28 more) due at once.
	w.pause()
	w.clk.Advance(30 * time.Second)

	got := receive(t, c, 1)
	st := c.Stats()
	if st.JumpsToLive != 1 {
		t.Fatalf("JumpsToLive = %d, want 1", st.JumpsToLive)
	}
	var target int64
	w.lock(func() {
		if len(w.manifests) != 1 {
			t.Fatalf("%d manifest requests, want 1", len(w.manifests))
		}
		target = w.manifests[0].Second
		for _, r := range w.requests {
			if r.second > s0+1 && r.second < target {
				t.Errorf("second %d requested, but it lies in the skipped range (%d, %d)", r.second, s0+1, target)
			}
		}
	})
	if want := target - (s0 + 1); st.SkippedSeconds != want {
		t.Errorf("SkippedSeconds = %d, want %d", st.SkippedSeconds, want)
	}
	if sec, _ := wire.SecondOf(got[0].ID); sec != target {
		t.Errorf("first message after the jump is from second %d, want %d", sec, target)
	}
	if st.SeqGaps != 0 {
		t.Errorf("SeqGaps = %d: a jump must take its seq from the manifest", st.SeqGaps)
	}
	w.noEarly()
}

// A poller far behind live because the slicer is (an S3 outage, a
// failover) does not jump past seconds the slicer is still writing: it walks
// through every one of them.
func TestNoJumpWhileTheSlicerCatchesUp(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.autoEmpty = false
	s0 := w.serverSecond()
	w.putSegment(s0, w.seqOf(s0), msgAt(s0, 0, 0, KindBarrage, "first"))
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()
	if got := receive(t, c, 1); got[0].Text != "first" {
		t.Fatalf("got %v", got)
	}
	// The slicer stalls for 15 s, then catches up: the manifest names a
	// second just past the client's while live is far ahead.
	w.pause()
	w.lock(func() { w.manifestAt = func(int64) int64 { return s0 + 2 } })
	w.clk.Advance(15 * time.Second)
	for s := s0 + 1; s <= s0+16; s++ {
		w.putSegment(s, w.seqOf(s), msgAt(s, 0, 0, KindBarrage, fmt.Sprintf("s%d", s-s0)))
	}
	w.run()
	got := receive(t, c, 5)
	for i, m := range got {
		if want := fmt.Sprintf("s%d", i+1); m.Text != want {
			t.Fatalf("message %d is %q, want %q (seconds skipped)", i, m.Text, want)
		}
	}
	if st := c.Stats(); st.JumpsToLive != 0 || st.SkippedSeconds != 0 {
		t.Fatalf("jumped: %+v", st)
	}
}

// A client synchronised to a video behind live that falls far behind (its
// clock jumps, as when a phone wakes) jumps no further than its playhead
// less playheadJump: what was stored after that moment is still due on its
// video, and jumping to live would lose it.
func TestPollJumpKeepsPlayhead(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.entrySync = true
	s0 := w.serverSecond()
	for s := s0; s < s0+60; s++ {
		w.putSegment(s, w.seqOf(s), msgAt(s, 0, 0, KindBarrage, "s"))
	}
	var behind atomic.Int64 // how far the video is behind the server's clock, ms
	c := w.newClient(func(cfg *Config) {
		cfg.NoEdge = true
		cfg.Playhead = func() (int64, bool) { return w.serverNow().UnixMilli() - behind.Load(), true }
	})
	w.run()
	receive(t, c, 1)
	// Freeze time; the video falls 12 s behind and the clock jumps 30 s.
	w.pause()
	behind.Store(12_000)
	w.clk.Advance(30 * time.Second)
	phSec := (w.serverNow().UnixMilli() - 12_000) / 1000

	eventually(t, "the jump and a fetch after it", func() bool {
		fetched := false
		w.lock(func() {
			fetched = slices.ContainsFunc(w.requests, func(r cdnRequest) bool { return r.second > s0+2 })
		})
		return c.Stats().JumpsToLive == 1 && fetched
	})
	var target int64
	w.lock(func() {
		if len(w.manifests) != 1 {
			t.Fatalf("%d manifest requests, want 1", len(w.manifests))
		}
		live := w.manifests[0].Second
		target = live
		for _, r := range w.requests {
			if r.second > s0+2 && r.second < target {
				target = r.second
			}
		}
		if target >= live {
			t.Fatalf("jumped to live (second %d); the playhead is at second %d", live, phSec)
		}
	})
	if target > phSec-1 || target < phSec-3 {
		t.Errorf("jumped to second %d, want its playhead (second %d) less 2 s", target, phSec)
	}
	// Every second from there is fetched: nothing due on the video is skipped.
	eventually(t, "the seconds after the jump", func() bool {
		n := 0
		w.lock(func() {
			for _, r := range w.requests {
				if r.second >= target && r.second <= phSec+5 {
					n++
				}
			}
		})
		return n >= int(phSec+5-target)
	})
}
