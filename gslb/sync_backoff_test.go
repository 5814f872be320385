package gslb_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"danmaku/gslb"
	"danmaku/internal/loadtable"
)

// countingTable counts the reads of the change log: one per sync.
type countingTable struct {
	*loadtable.MemoryTable
	reads atomic.Int64
}

func (t *countingTable) Changes(ctx context.Context, cursor []string) (loadtable.Changes, []string, error) {
	t.reads.Add(1)
	return t.MemoryTable.Changes(ctx, cursor)
}

// quietShow is an allocator running over a memory table in a synctest
// bubble, with nodes that write a keep-alive every 250 ms, as idle
// reporters do (loadtable.Reporter), the same load each time.
type quietShow struct {
	table *countingTable
	alloc *gslb.Allocator
	mu    sync.Mutex
	loads map[string]loadtable.NodeLoad // nil: the node is dead (writes nothing)
}

// startQuietShow starts the nodes' keep-alives and the allocator's Run,
// both stopped when t ends; call it inside the bubble.
func startQuietShow(t *testing.T, cfg gslb.AllocatorConfig, nodes ...loadtable.NodeLoad) *quietShow {
	t.Helper()
	s := &quietShow{table: &countingTable{MemoryTable: loadtable.NewMemoryTable()}, loads: map[string]loadtable.NodeLoad{}}
	for _, l := range nodes {
		s.loads[l.ID] = l
	}
	cfg.Table, cfg.Logger = s.table, discard
	var err error
	if s.alloc, err = gslb.NewAllocator(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, l := range nodes {
		s.write(t, l.ID)
	}
	wg.Go(func() {
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			s.mu.Lock()
			ids := make([]string, 0, len(s.loads))
			for id := range s.loads {
				ids = append(ids, id)
			}
			s.mu.Unlock()
			for _, id := range ids {
				s.write(t, id)
			}
		}
	})
	wg.Go(func() { _ = s.alloc.Run(ctx) })
	synctest.Wait()
	return s
}

// write reports node id's load now (nothing once it is dead).
func (s *quietShow) write(t *testing.T, id string) {
	s.mu.Lock()
	l, ok := s.loads[id]
	s.mu.Unlock()
	if !ok {
		return
	}
	l.At = time.Now()
	if err := s.table.Report(context.Background(), l); err != nil {
		t.Error(err)
	}
}

// set changes node id's load and writes it at once, as a reporter writes
// news.
func (s *quietShow) set(t *testing.T, l loadtable.NodeLoad) {
	s.mu.Lock()
	s.loads[l.ID] = l
	s.mu.Unlock()
	s.write(t, l.ID)
}

// kill stops node id's keep-alives.
func (s *quietShow) kill(id string) {
	s.mu.Lock()
	delete(s.loads, id)
	s.mu.Unlock()
}

// syncsIn counts the syncs over the next d.
func (s *quietShow) syncsIn(d time.Duration) int64 {
	n := s.table.reads.Load()
	time.Sleep(d)
	synctest.Wait()
	return s.table.reads.Load() - n
}

// A quiet table — nodes writing only keep-alives — is synced every MaxSync
// (50 ms), not every Sync (5 ms); the old mode (MaxSync below Sync) still
// syncs every Sync.
func TestAllocatorSyncBacksOffWhileQuiet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxSync  time.Duration
		min, max int64 // syncs a second
	}{
		{"on-change", 0, 19, 21},
		{"every-sync", time.Nanosecond, 199, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := startQuietShow(t, gslb.AllocatorConfig{MaxSync: tc.maxSync}, edge("e1", 10, 100), ingest("i1", 0, 0))
				time.Sleep(time.Second) // past the back-off
				if n := s.syncsIn(time.Second); n < tc.min || n > tc.max {
					t.Errorf("%d syncs in a quiet second, want %d..%d", n, tc.min, tc.max)
				}
				if _, err := s.alloc.Allocate("u1", anyIP); err != nil {
					t.Errorf("Allocate on a quiet table: %v", err)
				}
			})
		})
	}
}

// The worst case for a load change to reach the allocator is MaxSync after
// its write: a change written at any moment of a quiet interval is in the
// snapshot MaxSync later. Once news comes, syncs come every Sync again, so
// the changes that follow are seen within Sync.
func TestAllocatorSeesNewsWithinMaxSync(t *testing.T) {
	const maxSync, sync = 50 * time.Millisecond, 5 * time.Millisecond
	for _, offset := range []time.Duration{0, time.Millisecond, 17 * time.Millisecond, 33 * time.Millisecond, 49 * time.Millisecond} {
		t.Run(offset.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := startQuietShow(t, gslb.AllocatorConfig{Sync: sync, MaxSync: maxSync}, edge("e1", 10, 100), ingest("i1", 0, 0))
				time.Sleep(time.Second) // quiet: a sync every 50 ms
				// Between two syncs (they fall on whole milliseconds).
				time.Sleep(offset + 300*time.Microsecond)
				synctest.Wait()

				drained := edge("e1", 10, 100)
				drained.Draining = true
				s.set(t, drained)
				written := time.Now()
				// Step the bubble's clock a millisecond at a time until
				// the allocator shows the change.
				for {
					time.Sleep(time.Millisecond)
					synctest.Wait()
					if _, err := s.alloc.Allocate("u1", anyIP); errors.Is(err, gslb.ErrNoNodes) {
						break
					}
					if time.Since(written) > maxSync {
						t.Fatalf("the only edge drained, still handed out %v later", time.Since(written))
					}
				}

				// News brought the interval back to Sync: a change right
				// after is seen within Sync.
				time.Sleep(300 * time.Microsecond)
				s.set(t, edge("e1", 10, 100))
				time.Sleep(sync)
				synctest.Wait()
				if _, err := s.alloc.Allocate("u1", anyIP); err != nil {
					t.Fatalf("Allocate %v after the edge came back, just after news: %v", sync, err)
				}
			})
		})
	}
}

// A node that dies without removing itself is dropped within Stale +
// MaxSync + Sync of its last report, quiet table or not: its last report is
// heard within MaxSync, and the loop wakes Sync after the report would turn
// stale, whatever the back-off.
func TestAllocatorDropsDeadNodeWhileQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stale, maxSync, sync = time.Second, 50 * time.Millisecond, 5 * time.Millisecond
		s := startQuietShow(t, gslb.AllocatorConfig{Stale: stale, Sync: sync, MaxSync: maxSync}, edge("e1", 10, 100), ingest("i1", 0, 0))
		time.Sleep(time.Second + 100*time.Microsecond) // just after a keep-alive
		synctest.Wait()
		s.kill("e1")
		last := time.Now().Add(-100 * time.Microsecond) // e1's last report
		time.Sleep(stale - 10*time.Millisecond)
		synctest.Wait()
		if _, err := s.alloc.Allocate("u1", anyIP); err != nil {
			t.Fatalf("Allocate before the edge turned stale: %v", err)
		}
		time.Sleep(time.Until(last.Add(stale + maxSync + sync)))
		synctest.Wait()
		if _, err := s.alloc.Allocate("u1", anyIP); !errors.Is(err, gslb.ErrNoNodes) {
			t.Fatalf("Allocate Stale+MaxSync+Sync after the edge's last report: err = %v, want ErrNoNodes", err)
		}
	})
}
