package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

func tdOf(ms ...Message) []TakenDown {
	out := make([]TakenDown, len(ms))
	for i, m := range ms {
		out[i] = TakenDown{ID: m.ID, Kind: m.Kind}
	}
	return out
}

func tdFrame(t testing.TB, tds []TakenDown, msgs ...Message) []byte {
	t.Helper()
	b, err := wire.EncodeFrame(&wire.Frame{V: 1, Room: testRoom, Messages: msgs, TakenDown: tds})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edgeFirst makes the edge run send on its first connection, then read
// until the client goes; the channel is closed once send has returned.
func (w *world) edgeFirst(send func(conn *websocket.Conn)) <-chan struct{} {
	sent := make(chan struct{})
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			send(conn)
			close(sent)
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	return sent
}

func (w *world) putTDSegment(second int64, tds []TakenDown, msgs ...Message) {
	b := encodeSeg(w.t, &wire.Segment{V: 1, Room: testRoom, Second: second, Seq: w.seqOf(second), Dur: 1000, Messages: msgs, TakenDown: tds})
	w.lock(func() { w.segments[second] = b })
}

// An edge takedown of two delivered comments, one on screen and one
// waiting: the app is told (a notice on Messages, in order after them), the
// render queue drops the waiting one and hands the shown one's notice to the
// UI, and the segment copies that follow are never delivered.
func TestTakedownFromEdge(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	b1, b2 := msgAt(s0, 100, 0, KindBarrage, "bad"), msgAt(s0, 200, 0, KindBarrage, "worse")
	b3 := msgAt(s0+1, 0, 0, KindBarrage, "fine")
	never := msgAt(s0, 300, 0, KindBarrage, "taken down before delivery")
	edgeSent := make(chan struct{})
	takedown := make(chan struct{})
	var reported struct {
		sync.Mutex
		td, rm int64
	}
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, b1, b2))
			close(edgeSent)
			<-takedown
			// A td-only frame, then a frame whose td names a message of its
			// own m: that copy is not delivered either.
			_ = conn.WriteMessage(websocket.BinaryMessage, tdFrame(t, tdOf(b1, b2)))
			_ = conn.WriteMessage(websocket.BinaryMessage, tdFrame(t, tdOf(never), never))
		}
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			var rep counterReport
			if json.Unmarshal(data, &rep) == nil {
				reported.Lock()
				reported.td += rep.TD
				reported.rm += rep.TDRm
				reported.Unlock()
			}
		}
	}
	w.putSegment(s0+1, w.seqOf(s0+1), b1, b2, never, b3)
	q, err := NewRenderQueue(RenderConfig{Visible: 1, Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	c := w.newClient(func(cfg *Config) {
		cfg.Render = q
		cfg.ReportInterval = 20 * time.Millisecond // real time
	})
	<-edgeSent
	for _, m := range receive(t, c, 2) {
		q.Push(m)
	}
	if m, ok := q.Next(); !ok || m.ID != b1.ID {
		t.Fatalf("Next = %v %v, want b1 on screen", m.ID, ok)
	}
	close(takedown)
	got := receive(t, c, 2)
	for i, want := range tdOf(b1, b2) {
		if td, ok := TakedownOf(got[i]); !ok || td != want {
			t.Fatalf("message %d = %+v, want the notice for %v", i, got[i], want)
		}
		q.Push(got[i])
	}
	if m, ok := q.Next(); !ok || m.ID != b1.ID || m.Kind != KindTakedown {
		t.Fatalf("Next = %+v %v, want b1's notice for the UI", m, ok)
	}
	if m, ok := q.Next(); ok {
		t.Fatalf("Next = %+v, want nothing: b2 was taken down while waiting", m)
	}
	w.run()
	if got := receive(t, c, 1); got[0].ID != b3.ID {
		t.Fatalf("segment delivered %v, want only b3", ids(got))
	}
	quiet(t, w, c, 1)
	st, rs := c.Stats(), q.Stats()
	if st.TakedownsApplied != 3 || st.TakedownNotices != 2 || st.TakedownsSuppressed != 4 {
		t.Errorf("stats = applied %d notices %d suppressed %d, want 3, 2, 4", st.TakedownsApplied, st.TakedownNotices, st.TakedownsSuppressed)
	}
	if rs.RemovedShown != 1 || rs.RemovedWaiting != 1 {
		t.Errorf("render stats = %+v, want one removed shown, one waiting", rs)
	}
	// The client's reports to the edge carry both counts.
	eventually(t, "the takedown counts reported", func() bool {
		reported.Lock()
		defer reported.Unlock()
		return reported.td == 3 && reported.rm == 1
	})
}

// A comment shown from the edge is taken down in a segment's td (a viewer
// whose edge missed the frame): the notice comes, the copy beside it and a
// later one do not.
func TestTakedownFromSegment(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	b1 := msgAt(s0, 100, 0, KindBarrage, "bad")
	g1 := msgAt(s0, 150, 0, KindGift, "")
	edgeSent := w.edgeFirst(func(conn *websocket.Conn) {
		_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, b1, g1))
	})
	// The segment holding the copy names the takedown; the next holds a
	// copy again (a slicer that wrote it before it knew) and the takedown
	// again.
	w.putTDSegment(s0+1, tdOf(b1), b1, g1)
	w.putTDSegment(s0+2, tdOf(b1), b1)
	c := w.newClient(nil)
	<-edgeSent
	receive(t, c, 2)
	w.run()
	got := receive(t, c, 1)
	if td, ok := TakedownOf(got[0]); !ok || td.ID != b1.ID || td.Kind != KindBarrage {
		t.Fatalf("segment delivered %+v, want b1's notice", got[0])
	}
	quiet(t, w, c, 2)
	st := c.Stats()
	if st.TakedownsApplied != 1 || st.TakedownNotices != 1 || st.TakedownsSuppressed != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// A late joiner: the room's list, read before the first segment, names a
// message in a segment the client walks through; it is never delivered and
// no notice is sent for it. A manifest counting more takedowns than the
// list held makes the client read the list again.
func TestTakedownLateJoiner(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	old := msgAt(s0, 100, 0, KindBarrage, "taken down before the join")
	ok := msgAt(s0, 200, 0, KindBarrage, "fine")
	later := msgAt(s0+1, 0, 0, KindBarrage, "taken down after the join")
	w.lock(func() {
		w.tdList = &wire.TakedownList{V: 1, Room: testRoom, N: 1, IDs: tdOf(old)}
		w.manifestTD = 1
	})
	w.putSegment(s0, w.seqOf(s0), old, ok)
	w.putSegment(s0+1, w.seqOf(s0+1), later)
	w.putSegment(s0+2, w.seqOf(s0+2), later)
	c := w.buildClient(nil)
	w.startClient(c)
	w.run()
	if got := receive(t, c, 1); got[0].ID != ok.ID {
		t.Fatalf("delivered %v, want only %s", ids(got), ok.ID)
	}
	// The list grows while the client runs; the manifest says so.
	w.pause()
	w.lock(func() {
		w.tdList = &wire.TakedownList{V: 1, Room: testRoom, N: 2, IDs: tdOf(old, later)}
		w.manifestTD = 2
	})
	if _, err := c.fetchManifest(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the list read again", func() bool { return c.Stats().TakedownsApplied == 2 })
	w.run()
	quiet(t, w, c, 3)
	st := c.Stats()
	if st.TakedownNotices != 0 || st.TakedownsSuppressed < 2 {
		t.Errorf("stats = %+v", st)
	}
}

// A replay never passes a listed message; a takedown it learns from a
// segment after passing the message is passed as a notice; a list older than
// the manifest is read again.
func TestReplayTakedowns(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.autoEmpty = false
	const from = 1_600_000_000
	a, b, c := msgAt(from, 0, 0, KindBarrage, "a"), msgAt(from, 1, 0, KindBarrage, "listed"), msgAt(from+1, 0, 0, KindBarrage, "c")
	w.putSegment(from, 1, a, b)
	w.putTDSegment(from+1, tdOf(a), c, a)
	w.putSegment(from+2, 3, b, a)
	w.lock(func() {
		w.tdList = &wire.TakedownList{V: 1, Room: testRoom, N: 1, IDs: tdOf(b)}
		w.manifestTD = 1
	})
	var got []string
	err := Replay(context.Background(), w.cdn.URL, testRoom, from, from+3, func(m Message) error {
		if td, ok := TakedownOf(m); ok {
			got = append(got, "-"+td.ID)
		} else {
			got = append(got, m.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a.ID, "-" + a.ID, c.ID}; !slices.Equal(got, want) {
		t.Errorf("replayed %v, want %v", got, want)
	}
	var hits int
	w.lock(func() { hits = w.listHits })
	// The start's list only: the segment's unlisted takedown came within
	// a second of it (takedownListEvery), and it is applied from the segment.
	if hits != 1 {
		t.Errorf("list read %d times, want 1", hits)
	}

	// A stale (cached) list: the manifest counts 2, the list holds 1.
	w.lock(func() { w.manifestTD, w.listHits = 2, 0 })
	got = nil
	if err := Replay(context.Background(), w.cdn.URL, testRoom, from, from+1, func(m Message) error {
		got = append(got, m.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	w.lock(func() { hits = w.listHits })
	if hits != replayListAttempts || !slices.Equal(got, []string{a.ID}) {
		t.Errorf("stale list: read %d times (want %d), replayed %v", hits, replayListAttempts, got)
	}

	// No list to be had: no replay.
	w.lock(func() { w.tdList = &wire.TakedownList{V: 7, Room: testRoom} })
	if err := Replay(context.Background(), w.cdn.URL, testRoom, from, from+1, func(Message) error { return nil }); !errorsIs(err, ErrReplay) {
		t.Errorf("Replay with a bad list = %v, want ErrReplay", err)
	}
}

// The taken-down set is bounded: the oldest are forgotten first.
func TestTakedownBounded(t *testing.T) {
	out := make(chan Message, 100)
	var st counters
	m := newMerger(out, newSeenSet(100, defaultSeenWindow), newSeenSet(3, takedownForever), &st)
	var tds []TakenDown
	for i := range 10 {
		tds = append(tds, TakenDown{ID: wire.FormatID(1000, uint64(i)), Kind: KindBarrage})
	}
	if _, err := m.takedown(context.Background(), tds, 0); err != nil {
		t.Fatal(err)
	}
	if m.td.len() != 3 || st.takedowns.Load() != 10 {
		t.Fatalf("set holds %d, applied %d; want 3 and 10", m.td.len(), st.takedowns.Load())
	}
	// The newest are remembered, the oldest forgotten.
	_ = m.deliver(context.Background(), []Message{{ID: tds[9].ID, Kind: KindBarrage}, {ID: tds[0].ID, Kind: KindBarrage}}, 0)
	if len(out) != 1 || (<-out).ID != tds[0].ID {
		t.Errorf("delivered the wrong one of a forgotten and a remembered takedown")
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
