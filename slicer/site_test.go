package slicer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// siteRig runs the loops of several rooms of one slicer turn by turn on a
// fake clock, over a memory stream store.
type siteRig struct {
	t       *testing.T
	clk     *clock.Fake
	streams *stream.MemoryStore
	objects *objstore.MemoryStore
	s       *Slicer
	st      map[string]*roomState
}

func newSiteRig(t *testing.T) *siteRig {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := &siteRig{t: t, clk: clk, streams: stream.NewMemoryStore(clk), objects: objstore.NewMemoryStore(), st: map[string]*roomState{}}
	r.s = r.slicer("a", r.streams)
	return r
}

func (r *siteRig) slicer(node string, streams stream.Store) *Slicer {
	r.t.Helper()
	s, err := New(Config{NodeID: node, Streams: streams, Objects: r.objects, Clock: r.clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// open opens room now and starts leading it with s, as lead does: resume
// from the manifest (the room's opening as the discovery passes it), then
// claim what a predecessor left.
func (r *siteRig) open(s *Slicer, room string) {
	r.t.Helper()
	ctx := context.Background()
	if err := r.streams.OpenRoom(ctx, room); err != nil {
		r.t.Fatal(err)
	}
	rooms, _ := r.streams.Rooms(ctx)
	var opened time.Time
	for _, x := range rooms {
		if x.ID == room {
			opened = x.Opened
		}
	}
	st, err := s.resume(ctx, room, opened)
	if err != nil {
		r.t.Fatal(err)
	}
	st.handle = &roomHandle{}
	if err := s.reclaim(ctx, st, 0); err != nil {
		r.t.Fatal(err)
	}
	r.s = s
	r.st[room] = st
}

// turn is one turn of every room's loop at the clock's time.
func (r *siteRig) turn() {
	r.t.Helper()
	ctx := context.Background()
	now := r.clk.Now()
	for _, st := range r.st {
		for {
			again, err := r.s.advance(ctx, st, now)
			if err != nil {
				r.t.Fatal(err)
			}
			if !again {
				break
			}
		}
		for r.s.complete(st) {
			if err := r.s.writeSlot(ctx, st, st.readUpTo, now); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// run moves the clock on in steps of 250 ms for d, a turn at each.
func (r *siteRig) run(d time.Duration) {
	for end := r.clk.Now().Add(d); r.clk.Now().Before(end); {
		r.clk.Advance(250 * time.Millisecond)
		r.turn()
	}
}

func (r *siteRig) broadcast(n int, tag string) []wire.Message {
	r.t.Helper()
	msgs := make([]wire.Message, n)
	for i := range msgs {
		msgs[i] = wire.Message{Kind: wire.KindSystem, Role: "ops", Text: fmt.Sprintf("%s %d", tag, i), Site: true}
	}
	out, err := r.streams.Append(context.Background(), stream.SiteKey, msgs)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

func (r *siteRig) gifts(room string, n int, tag string) []wire.Message {
	r.t.Helper()
	out, err := r.streams.Append(context.Background(), stream.Key{Room: room, Lane: stream.Live}, flood(n, tag))
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// segments returns every segment of room, by second, from its first (seq 1)
// to the manifest's, checking that seq has no gap.
func (r *siteRig) segments(room string) map[int64]*wire.Segment {
	r.t.Helper()
	ctx := context.Background()
	obj, err := r.objects.Get(ctx, wire.ManifestKey(room))
	if err != nil {
		r.t.Fatal(err)
	}
	man, err := wire.DecodeManifest(obj.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[int64]*wire.Segment{}
	for sec, seq := man.Second, man.Seq; seq >= 1; sec, seq = sec-1, seq-1 {
		o, err := r.objects.Get(ctx, wire.SegmentKey(room, sec))
		if err != nil {
			r.t.Fatalf("room %s second %d (seq %d): %v", room, sec, seq, err)
		}
		seg, err := wire.DecodeSegment(o.Body)
		if err != nil || seg.Seq != seq {
			r.t.Fatalf("room %s second %d: seq %d, %v; want seq %d", room, sec, seg.Seq, err, seq)
		}
		out[sec] = seg
	}
	return out
}

// siteCounts counts, per site id, the segments of room that hold it, and
// checks every site message in them is flagged and a system message.
func (r *siteRig) siteCounts(room string) map[string]int {
	r.t.Helper()
	n := map[string]int{}
	for sec, seg := range r.segments(room) {
		for _, m := range seg.Messages {
			if !m.Site {
				continue
			}
			if m.Kind != wire.KindSystem || m.Identity() != "s/"+m.ID {
				r.t.Fatalf("room %s second %d: site message %+v", room, sec, m)
			}
			n[m.ID]++
		}
	}
	return n
}

// checkSiteOnce fails unless room's segments hold each of want exactly
// once and no other site message, and the room's site group has nothing
// left pending.
func (r *siteRig) checkSiteOnce(room string, want []wire.Message) {
	r.t.Helper()
	got := r.siteCounts(room)
	for _, m := range want {
		if got[m.ID] != 1 {
			r.t.Fatalf("room %s: broadcast %s is in %d segments, want 1", room, m.ID, got[m.ID])
		}
	}
	if len(got) != len(want) {
		r.t.Fatalf("room %s: segments hold %d broadcasts, want %d", room, len(got), len(want))
	}
	left, err := r.streams.Claim(context.Background(), stream.SiteKey, r.s.siteGroup(room), "check", 0, 0)
	if err != nil || len(left) != 0 {
		r.t.Fatalf("room %s: %d site messages still pending (%v)", room, len(left), err)
	}
}

// TestSiteBroadcastsReachEveryRoomOnce: three live rooms, broadcasts at
// several moments: each room's segments hold each broadcast exactly once,
// flagged Site with the site stream's id, in the second its id names.
func TestSiteBroadcastsReachEveryRoomOnce(t *testing.T) {
	r := newSiteRig(t)
	rooms := []string{"r1", "r2", "r3"}
	for _, room := range rooms {
		r.open(r.s, room)
	}
	r.run(time.Second)
	var all []wire.Message
	for i := range 4 {
		all = append(all, r.broadcast(2, fmt.Sprintf("wave%d", i))...)
		r.gifts("r2", 3, fmt.Sprintf("g%d", i)) // a room with traffic of its own
		r.clk.Advance(150 * time.Millisecond)
		r.turn()
		r.run(time.Second)
	}
	r.run(2 * time.Second)
	for _, room := range rooms {
		r.checkSiteOnce(room, all)
		for sec, seg := range r.segments(room) {
			for _, m := range seg.Messages {
				if got, _ := wire.SecondOf(m.ID); m.Site && got != sec {
					t.Fatalf("room %s: broadcast %s written in second %d, not its own", room, m.ID, sec)
				}
			}
		}
	}
	if n := counterValue(r.s.m.site.WithLabelValues("written")); n != float64(3*len(all)) {
		t.Fatalf("site written counter %v, want %d", n, 3*len(all))
	}
}

// TestSiteBroadcastBeforeOpeningNotShown: a room opened after a broadcast
// does not show it (it is acknowledged in the room's group and skipped); a
// room open at the time does, and both show the ones after.
func TestSiteBroadcastBeforeOpeningNotShown(t *testing.T) {
	r := newSiteRig(t)
	r.open(r.s, "early")
	r.run(time.Second)
	old := r.broadcast(3, "old")
	r.run(30 * time.Second) // long past: the room opened next could catch up to it
	r.open(r.s, "late")
	r.clk.Advance(100 * time.Millisecond)
	later := r.broadcast(1, "new")
	r.run(3 * time.Second)
	r.checkSiteOnce("early", append(append([]wire.Message(nil), old...), later...))
	r.checkSiteOnce("late", later)
	if n := counterValue(r.s.m.site.WithLabelValues("skipped")); n != float64(len(old)) {
		t.Fatalf("skipped %v, want %d", n, len(old))
	}
}

// TestSiteWindowClosesAtRoomEnd: once the room's event has ended, later
// broadcasts are not the room's (it could never finish while they come).
func TestSiteWindowClosesAtRoomEnd(t *testing.T) {
	r := newSiteRig(t)
	r.open(r.s, "r1")
	r.run(time.Second)
	in := r.broadcast(1, "in")
	r.st["r1"].handle.endMs.Store(r.clk.Now().UnixMilli())
	r.run(3 * time.Second) // past the end and its grace
	out := r.broadcast(1, "out")
	r.run(2 * time.Second)
	r.checkSiteOnce("r1", in)
	if _, ok := r.siteCounts("r1")[out[0].ID]; ok {
		t.Fatal("a broadcast after the room's end was written")
	}
	st := r.st["r1"]
	if !r.s.finished(st, st.handle.endMs.Load()) {
		t.Fatal("the room cannot finish")
	}
	// Finishing drops the room's site group: read again, a group of that
	// name starts afresh from the stream's start (the old one had settled
	// both broadcasts and would hand out nothing).
	if err := r.s.finish(context.Background(), st); !errors.Is(err, errRoomEnded) {
		t.Fatalf("finish: %v", err)
	}
	again, err := r.streams.ReadGroup(context.Background(), stream.SiteKey, r.s.siteGroup("r1"), "check", 0, 0)
	if err != nil || len(again) != 2 {
		t.Fatalf("the ended room's site group was kept: a read gave %d entries, %v", len(again), err)
	}
}

// failingAck is a stream store whose site acks fail: a leader that dies
// between writing a segment and acknowledging what it holds.
type failingAck struct{ stream.Store }

func (f failingAck) Ack(ctx context.Context, key stream.Key, group string, ids ...string) error {
	if key == stream.SiteKey {
		return errors.New("leader died")
	}
	return f.Store.Ack(ctx, key, group, ids...)
}

// TestSiteBroadcastsOnceAcrossFailover: leader a writes segments holding
// broadcasts but dies before acknowledging them, with more broadcasts read
// and not yet written; leader b takes every room over (claiming what a
// left pending and checking it against the written segments), and more
// broadcasts come after. Each room shows each broadcast once.
func TestSiteBroadcastsOnceAcrossFailover(t *testing.T) {
	r := newSiteRig(t)
	a := r.slicer("a", failingAck{r.streams})
	rooms := []string{"r1", "r2", "r3"}
	for _, room := range rooms {
		r.open(a, room)
	}
	r.run(time.Second)
	written := r.broadcast(3, "written") // written by a, never acked
	r.run(2 * time.Second)
	r.clk.Advance(100 * time.Millisecond)
	unwritten := r.broadcast(2, "read") // read by a, its slot not yet written
	r.gifts("r1", 2, "g")
	r.turn()
	for _, room := range rooms {
		if len(r.st[room].pending) == 0 {
			t.Fatalf("room %s: a holds nothing of the second in progress", room)
		}
		if _, ok, _ := r.streams.PendingFloor(context.Background(), stream.SiteKey, a.siteGroup(room)); !ok {
			t.Fatalf("room %s: nothing pending in the site group after a's failed acks", room)
		}
	}
	// a dies; b takes over.
	b := r.slicer("b", r.streams)
	r.st = map[string]*roomState{}
	for _, room := range rooms {
		r.open(b, room)
	}
	if got := counterValue(b.m.reclaimed); got < float64(3*(len(written)+len(unwritten))) {
		t.Fatalf("b reclaimed %v messages, want at least the %d site messages a left", got, 3*(len(written)+len(unwritten)))
	}
	after := r.broadcast(2, "after")
	r.run(3 * time.Second)
	all := append(append(append([]wire.Message(nil), written...), unwritten...), after...)
	for _, room := range rooms {
		r.checkSiteOnce(room, all)
	}
}

// TestSiteStormKeepsRoomGiftsOnTime: 300 broadcasts in one second, in a
// room that also gets gifts every second: the gifts are written in their
// own seconds, the broadcasts take what the gifts leave of the budget
// (their quota at least) and are carried, and every one is written once.
func TestSiteStormKeepsRoomGiftsOnTime(t *testing.T) {
	r := newSiteRig(t)
	r.open(r.s, "busy")
	r.open(r.s, "idle")
	r.run(time.Second)
	storm := r.broadcast(300, "storm")
	var gifts []wire.Message
	for i := range 12 {
		r.clk.Advance(100 * time.Millisecond)
		gifts = append(gifts, r.gifts("busy", 40, fmt.Sprintf("g%d", i))...)
		r.turn()
		r.run(time.Second - 100*time.Millisecond)
	}
	r.run(10 * time.Second)
	r.checkSiteOnce("busy", storm)
	r.checkSiteOnce("idle", storm)
	budget := slotBudget(defaultBudget, wire.SegmentDuration)
	quota := siteQuota(budget, DefaultShares)
	inSegments := 0
	for sec, seg := range r.segments("busy") {
		site, own := 0, 0
		for _, m := range seg.Messages {
			if m.Site {
				site++
				continue
			}
			own++
			if got, _ := wire.SecondOf(m.ID); got != sec {
				t.Fatalf("gift %s (second %d) written in second %d", m.ID, got, sec)
			}
		}
		if site > max(quota, budget-own) {
			t.Fatalf("second %d: %d broadcasts beside %d of the room's own, over the quota %d", sec, site, own, quota)
		}
		inSegments += own
	}
	if inSegments != len(gifts) {
		t.Fatalf("segments hold %d gifts, want %d", inSegments, len(gifts))
	}
	// The idle room shows them at its whole budget: 5 seconds.
	for sec, seg := range r.segments("idle") {
		if len(seg.Messages) > budget {
			t.Fatalf("idle second %d holds %d, over the budget", sec, len(seg.Messages))
		}
	}
}

// TestSiteTrim: the site stream is trimmed to the last hour, at most once
// a minute per process.
func TestSiteTrim(t *testing.T) {
	r := newSiteRig(t)
	ctx := context.Background()
	old := r.broadcast(1, "old")
	r.clk.Advance(siteRetention + time.Second)
	kept := r.broadcast(1, "kept")
	r.s.maybeTrimSite(ctx, r.clk.Now())
	left, _ := r.streams.Read(ctx, stream.SiteKey, "0", 0, 0)
	if len(left) != 1 || left[0].ID != kept[0].ID {
		t.Fatalf("after the trim the site stream holds %v; want only %s (not %s)", left, kept[0].ID, old[0].ID)
	}
	// Within the minute, nothing more is trimmed, whatever the store time.
	r.clk.Advance(siteTrimEvery - time.Second)
	r.s.maybeTrimSite(ctx, r.clk.Now().Add(2*siteRetention))
	if left, _ := r.streams.Read(ctx, stream.SiteKey, "0", 0, 0); len(left) != 1 {
		t.Fatalf("trimmed twice within a minute: %d left", len(left))
	}
	r.clk.Advance(time.Second)
	r.s.maybeTrimSite(ctx, r.clk.Now().Add(2*siteRetention))
	if left, _ := r.streams.Read(ctx, stream.SiteKey, "0", 0, 0); len(left) != 0 {
		t.Fatalf("not trimmed a minute later: %d left", len(left))
	}
}

// noSite is a stream store without the site stream: a slicer from before
// the broadcasts.
type noSite struct{ stream.Store }

func (n noSite) ReadGroup(ctx context.Context, key stream.Key, group, consumer string, count int, block time.Duration) ([]stream.Entry, error) {
	if key == stream.SiteKey {
		return nil, nil
	}
	return n.Store.ReadGroup(ctx, key, group, consumer, count, block)
}

// TestSiteRolloutShowsNoOldBroadcasts: a room long live under a slicer that
// did not read the site stream is taken over by one that does (its site
// group is new): broadcasts older than maxCatchUp behind the room are not
// shown, a recent one is, once, in the next slot.
func TestSiteRolloutShowsNoOldBroadcasts(t *testing.T) {
	r := newSiteRig(t)
	r.open(r.slicer("old", noSite{r.streams}), "r1")
	r.run(time.Minute)
	stale := r.broadcast(1, "stale")
	r.run(8 * time.Minute)
	recent := r.broadcast(1, "recent")
	r.run(time.Minute)
	r.st = map[string]*roomState{}
	r.open(r.slicer("new", r.streams), "r1")
	r.run(2 * time.Second)
	r.checkSiteOnce("r1", recent)
	if n := counterValue(r.s.m.site.WithLabelValues("skipped")); n != float64(len(stale)) {
		t.Fatalf("skipped %v, want %d", n, len(stale))
	}
}
