package ingest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/internal/testwait"
	"danmaku/sdk/wire"
)

// switchGate is a RoomGate that fails while down is set: before reaching
// the gate, or with landed also set, after it (the answer lost on the way
// back, as with a Redis timeout after the script ran). It counts Flushes.
type switchGate struct {
	RoomGate
	down, landed atomic.Bool
	flushes      atomic.Int64
}

func (g *switchGate) Flush(ctx context.Context, room string, b Batch) (FlushResult, error) {
	g.flushes.Add(1)
	if !g.down.Load() {
		return g.RoomGate.Flush(ctx, room, b)
	}
	if g.landed.Load() {
		if _, err := g.RoomGate.Flush(ctx, room, b); err != nil {
			return FlushResult{}, err
		}
	}
	return FlushResult{}, errors.New("gate down")
}

// The rig's writer flushes on the fake clock (its window, hold and
// retries): a test moves it with await, never waits for real time.
type writerRig struct {
	clk    *clock.Fake
	window time.Duration
	store  *stream.MemoryStore
	gate   *switchGate
	w      *writer
	nodes  atomic.Int64
}

func newWriterRig(t *testing.T, window, hold time.Duration) *writerRig {
	t.Helper()
	r := &writerRig{clk: clock.NewFake(t0), window: window}
	r.store = stream.NewMemoryStore(r.clk)
	r.gate = &switchGate{RoomGate: NewMemoryRoomGate(r.store, r.clk)}
	r.nodes.Store(1)
	r.w = newWriter(r.gate, "n1", window, hold, r.clk, r.clk, discard, func() int { return int(r.nodes.Load()) }, nil)
	return r
}

// await waits for cond, moving the fake clock a window between two looks:
// the flush, hold and retry timers fire as the clock passes them, however
// slowly the goroutines run.
func (r *writerRig) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, func() bool {
		if cond() {
			return true
		}
		r.clk.Advance(r.window)
		return false
	})
}

func (r *writerRig) stored(t *testing.T, room string) int {
	t.Helper()
	es, err := r.store.Read(context.Background(), stream.Key{Room: room, Lane: stream.Barrage}, "0", 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// submitAll submits n comments to room at once and returns their outcomes
// by kind, once every one is answered.
func (r *writerRig) submitAll(t *testing.T, ctx context.Context, room string, n int, lim roomLimit) map[outcome]int {
	var (
		mu       sync.Mutex
		out      = map[outcome]int{}
		answered atomic.Int64
	)
	for i := range n {
		go func() {
			o := r.w.submit(ctx, room, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Text: "hi"}, lim)
			mu.Lock()
			out[o]++
			mu.Unlock()
			answered.Add(1)
		}()
	}
	r.await(t, "every comment answered", func() bool { return answered.Load() == int64(n) })
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(out)
}

// TestWriterBatches: comments arriving together go to the gate in a few
// flushes, not one each, and every one is stored.
func TestWriterBatches(t *testing.T) {
	r := newWriterRig(t, 200*time.Millisecond, time.Minute)
	out := r.submitAll(t, context.Background(), room, 300, roomLimit{1000, 1000})
	if out[outStored] != 300 || r.stored(t, room) != 300 {
		t.Fatalf("outcomes %v, stored %d; want 300 stored", out, r.stored(t, room))
	}
	// 64, 128, then the rest (the offer doubles while the bucket has
	// tokens): a handful, however the goroutines were scheduled.
	if n := r.gate.flushes.Load(); n > 10 {
		t.Fatalf("%d flushes for 300 comments", n)
	}
}

// TestWriterDryBucket: past the room bucket, comments are dropped (answered,
// not stored) by the gate's word, and the dry bucket drops the comments
// that waited with them.
func TestWriterDryBucket(t *testing.T) {
	r := newWriterRig(t, time.Millisecond, time.Minute)
	out := r.submitAll(t, context.Background(), room, 100, roomLimit{40, 1e-6})
	if out[outStored] != 40 || out[outRoomBucket] != 60 || r.stored(t, room) != 40 {
		t.Fatalf("outcomes %v, stored %d; want 40 stored, 60 dropped", out, r.stored(t, room))
	}
}

// TestWriterGateDown: while the gate is unreachable the node admits by its
// share of the room's limit (never open, never closed); what it admitted is
// stored once the gate is back, and the batch in flight when it failed is
// stored once although it reached the gate.
func TestWriterGateDown(t *testing.T) {
	r := newWriterRig(t, time.Millisecond, time.Minute)
	r.nodes.Store(4)
	lim := roomLimit{capacity: 40, perSec: 1e-6} // share: 10
	// One comment goes through, then the gate fails after storing its
	// batch: the batch is resent (and answered once).
	r.gate.down.Store(true)
	r.gate.landed.Store(true)
	var first outcome
	done := make(chan struct{})
	go func() {
		first = r.w.submit(context.Background(), room, wire.Message{Kind: wire.KindBarrage, User: "first", Text: "hi"}, lim)
		close(done)
	}()
	// The batch lands in the store before the flusher hears the error:
	// wait for the queue to be failing, so that the 30 below are all
	// judged by the share.
	q := r.w.queueOf(room)
	testwait.For(t, "the room's queue to be failing", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.failing
	})
	r.gate.landed.Store(false)
	// 30 more while it is down: the node's share (40/4 = 10) admits 10
	// and drops 20 at once. The gate comes back only once all 30 are
	// judged — else, on a busy machine, the submits not yet run would meet
	// a gate that answers again and be stored by the room bucket.
	var (
		mu      sync.Mutex
		out     = map[outcome]int{}
		wg      sync.WaitGroup
		dropped atomic.Int64
	)
	for i := range 30 {
		wg.Go(func() {
			o := r.w.submit(context.Background(), room, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Text: "hi"}, lim)
			if o == outRoomShare {
				dropped.Add(1)
			}
			mu.Lock()
			out[o]++
			mu.Unlock()
		})
	}
	waitQueued(t, r.w, room, 10)
	testwait.For(t, "20 comments dropped by the share", func() bool { return dropped.Load() == 20 })
	r.gate.down.Store(false)
	// The failed batch and the 10 admitted go at the next retries.
	r.await(t, "every comment answered", func() bool {
		select {
		case <-done:
		default:
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return out[outStored]+out[outRoomShare] == 30
	})
	wg.Wait()
	if first != outStored || out[outStored] != 10 || out[outRoomShare] != 20 {
		t.Fatalf("first %v, outcomes %v; want stored, then 10 stored and 20 dropped by the share", first, out)
	}
	if n := r.stored(t, room); n != 11 {
		t.Fatalf("stored %d, want 11 (the first once)", n)
	}
}

// waitQueued waits until room's queue holds n comments.
func waitQueued(t *testing.T, w *writer, room string, n int) {
	t.Helper()
	q := w.queueOf(room)
	testwait.For(t, fmt.Sprintf("the queue to hold %d", n), func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.queue) == n
	})
}

// TestWriterHold: a comment waits at most hold for a failing gate, then is
// answered unavailable. A queued one is never stored; one whose batch was
// in flight when the gate failed may have been stored, so that batch is
// still resent (never half-kept) and lands once the gate is back.
func TestWriterHold(t *testing.T) {
	r := newWriterRig(t, time.Millisecond, 50*time.Millisecond)
	r.gate.down.Store(true)
	lim := roomLimit{100, 100}
	var wg sync.WaitGroup
	outs := make([]outcome, 2)
	wg.Go(func() {
		outs[0] = r.w.submit(context.Background(), room, wire.Message{Kind: wire.KindBarrage, User: "a", Text: "a"}, lim)
	})
	testwait.For(t, "a flush", func() bool { return r.gate.flushes.Load() > 0 })
	var answered atomic.Int64
	wg.Go(func() {
		outs[1] = r.w.submit(context.Background(), room, wire.Message{Kind: wire.KindBarrage, User: "b", Text: "b"}, lim)
		answered.Add(1)
	})
	// Both wait hold (50 ms of the fake clock, passed a window at a time).
	r.await(t, "the second comment answered", func() bool { return answered.Load() == 1 })
	wg.Wait()
	if outs[0] != outUnavailable || outs[1] != outUnavailable {
		t.Fatalf("outcomes %v, want both unavailable after hold", outs)
	}
	r.gate.down.Store(false)
	r.await(t, "the in-flight batch stored", func() bool { return r.stored(t, room) >= 1 })
	// Once the queue holds no failed batch (head) and nothing queued,
	// nothing can be sent again: the count is final.
	q := r.w.queueOf(room)
	r.await(t, "the queue to go idle", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.head == nil && len(q.queue) == 0
	})
	if n := r.stored(t, room); n != 1 {
		t.Fatalf("stored %d, want 1", n)
	}
}

// TestWriterClientGone: a comment whose client goes away before its flush
// is withdrawn, not stored.
func TestWriterClientGone(t *testing.T) {
	r := newWriterRig(t, time.Hour, time.Minute)
	// The first comment into a quiet room is flushed at once; the next
	// waits the window (an hour) behind it.
	if o := r.w.submit(context.Background(), room, wire.Message{Kind: wire.KindBarrage, User: "z", Text: "z"}, roomLimit{10, 10}); o != outStored {
		t.Fatalf("first comment: %v", o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan outcome)
	go func() {
		res <- r.w.submit(ctx, room, wire.Message{Kind: wire.KindBarrage, User: "a", Text: "a"}, roomLimit{10, 10})
	}()
	waitQueued(t, r.w, room, 1)
	cancel()
	if o := <-res; o != outGone {
		t.Fatalf("outcome %v, want gone", o)
	}
	waitQueued(t, r.w, room, 0)
	if n := r.stored(t, room); n != 1 {
		t.Fatalf("stored %d", n)
	}
}

// TestWriterSlots: node i of n flushes at i·window/n past each multiple of
// the window, the first such time at or after the one asked.
func TestWriterSlots(t *testing.T) {
	const window = 150 * time.Millisecond
	for _, tc := range []struct {
		rank, n int
		phase   time.Duration
	}{{0, 1, 0}, {0, 3, 0}, {1, 3, 50 * time.Millisecond}, {2, 3, 100 * time.Millisecond}, {4, 3, 50 * time.Millisecond}} {
		s := &Server{}
		s.ingestNodes.Store(int64(tc.n))
		s.ingestRank.Store(int64(tc.rank))
		if got := s.flushPhase(window); got != tc.phase {
			t.Fatalf("rank %d of %d: phase %v, want %v", tc.rank, tc.n, got, tc.phase)
		}
		w := &writer{window: window, phase: s.flushPhase}
		base := time.Unix(1_800_000_000, 0) // a multiple of the window
		for _, off := range []time.Duration{0, time.Millisecond, 49 * time.Millisecond, 50 * time.Millisecond, 149 * time.Millisecond, 7 * time.Second} {
			at := base.Add(off)
			got := w.slot(at)
			if got.Before(at) || !got.Before(at.Add(window)) {
				t.Fatalf("slot(%v) = %v: not within a window after", off, got.Sub(base))
			}
			if r := (got.UnixNano() - int64(tc.phase)) % int64(window); r != 0 {
				t.Fatalf("rank %d of %d: slot(+%v) = +%v, %v off its phase", tc.rank, tc.n, off, got.Sub(base), time.Duration(r))
			}
		}
	}
}
