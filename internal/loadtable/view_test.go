package loadtable_test

import (
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx/redistest"

	"context"
	"errors"
	"testing"
	"time"
)

// recordingTable records the cursors a View reads with, and fails
// while broken.
type recordingTable struct {
	*loadtable.MemoryTable
	whole  []bool // one per Changes: read with a nil cursor
	broken bool
}

func (t *recordingTable) Changes(ctx context.Context, cursor []string) (loadtable.Changes, []string, error) {
	t.whole = append(t.whole, cursor == nil)
	if t.broken {
		return loadtable.Changes{}, nil, errTableDown
	}
	return t.MemoryTable.Changes(ctx, cursor)
}

// TestTableView: a view follows reports and removals by reading what
// changed, and reads whole at first, every few seconds, after a failed read
// and after a gap.
func TestTableView(t *testing.T) {
	ctx := context.Background()
	tab := &recordingTable{MemoryTable: loadtable.NewMemoryTable()}
	v := loadtable.NewView(tab)
	now := t0
	sync := func(wantWhole bool, wantIDs ...string) {
		t.Helper()
		loads, st, err := v.Sync(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, l := range loads {
			ids = append(ids, l.ID)
		}
		if len(ids) != len(wantIDs) {
			t.Fatalf("view = %v, want %v", ids, wantIDs)
		}
		for i := range ids {
			if ids[i] != wantIDs[i] {
				t.Fatalf("view = %v, want %v", ids, wantIDs)
			}
		}
		if got := tab.whole[len(tab.whole)-1]; got != wantWhole || st.Full != wantWhole {
			t.Fatalf("read whole = %v (stats %v), want %v", got, st.Full, wantWhole)
		}
	}
	mustReport(t, tab, edge("b", 1, 10), edge("a", 1, 10))
	sync(true, "a", "b")
	now = now.Add(5 * time.Millisecond)
	mustReport(t, tab, edge("c", 1, 10))
	if err := tab.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	sync(false, "b", "c")
	// A changed load is taken in place.
	mustReport(t, tab, edge("b", 7, 10))
	now = now.Add(5 * time.Millisecond)
	loads, _, _ := v.Sync(ctx, now)
	if loads[0].Conns != 7 {
		t.Fatalf("b's conns = %d, want 7", loads[0].Conns)
	}
	// A failed read keeps the view; the next read is whole.
	tab.broken = true
	if _, _, err := v.Sync(ctx, now); !errors.Is(err, errTableDown) {
		t.Fatalf("Sync on a broken table: %v", err)
	}
	tab.broken = false
	now = now.Add(5 * time.Millisecond)
	sync(true, "b", "c")
	// A gap longer than WholeAfterGap: whole.
	now = now.Add(150 * time.Millisecond)
	sync(true, "b", "c")
	now = now.Add(5 * time.Millisecond)
	sync(false, "b", "c")
	// Every few seconds: whole, even while the log continues.
	for range 1001 {
		now = now.Add(5 * time.Millisecond)
		_, _, _ = v.Sync(ctx, now)
	}
	whole := 0
	for _, w := range tab.whole[len(tab.whole)-1001:] {
		if w {
			whole++
		}
	}
	if whole != 1 {
		t.Fatalf("%d whole reads in 5 s of syncs, want 1", whole)
	}
}

// TestViewHeard: a view stamps each report with when it first read it, by
// the reader's clock — a report read again (the whole read every few
// seconds) keeps its stamp, a new one gets the read's time, and a node's
// first report is heard at its At when that is earlier (a dead node's
// report is not made new by a reader's start) — and Age judges by it.
func TestViewHeard(t *testing.T) {
	ctx := context.Background()
	table := loadtable.NewMemoryTable()
	t0 := time.UnixMilli(1_700_000_000_000)
	report := func(id string, at time.Time) {
		if err := table.Report(ctx, loadtable.NodeLoad{ID: id, Kind: loadtable.KindEdge, Addr: "ws://" + id, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	heard := func(v *loadtable.View, now time.Time) map[string]time.Time {
		loads, _, err := v.Sync(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]time.Time{}
		for _, l := range loads {
			m[l.ID] = l.Heard
		}
		return m
	}
	report("dead", t0.Add(-30*time.Second))
	report("behind", t0.Add(-2*time.Second))
	report("ahead", t0.Add(2*time.Second))
	v := loadtable.NewView(table)
	h := heard(v, t0)
	if !h["dead"].Equal(t0.Add(-30*time.Second)) || !h["behind"].Equal(t0.Add(-2*time.Second)) || !h["ahead"].Equal(t0) {
		t.Fatalf("first read: heard %v", h)
	}
	t1 := t0.Add(250 * time.Millisecond)
	report("behind", t1.Add(-2*time.Second))
	if h = heard(v, t1); !h["behind"].Equal(t1) || !h["ahead"].Equal(t0) {
		t.Fatalf("behind reported again: heard %v", h)
	}
	t2 := t0.Add(6 * time.Second) // past the whole read's interval
	if h = heard(v, t2); !h["behind"].Equal(t1) || !h["ahead"].Equal(t0) || !h["dead"].Equal(t0.Add(-30*time.Second)) {
		t.Fatalf("whole read: heard %v, want the stamps kept", h)
	}
	if age := (loadtable.NodeLoad{At: t0, Heard: t1}).Age(t2); age != t2.Sub(t1) {
		t.Errorf("Age by Heard: %v", age)
	}
	if age := (loadtable.NodeLoad{At: t0}).Age(t2); age != 6*time.Second {
		t.Errorf("Age without Heard: %v", age)
	}
}

// snapshotOnly hides a table's change log: a View reads it whole each time.
type snapshotOnly struct{ loadtable.Table }

// TestViewNews: a sync counts as news what would change an allocator's
// decision — a new node, a removal, a node a whole read no longer shows, a
// load moved by a step — and not keep-alives or whole reads of a table
// that did not change, whichever way the view reads the table.
func TestViewNews(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table func(t *testing.T) loadtable.Table
	}{
		{"memory", func(*testing.T) loadtable.Table { return loadtable.NewMemoryTable() }},
		{"redis", func(t *testing.T) loadtable.Table { return loadtable.NewRedisTable(redistest.Client(t)) }},
		{"snapshot-only", func(*testing.T) loadtable.Table { return snapshotOnly{loadtable.NewMemoryTable()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tab := tc.table(t)
			v := loadtable.NewView(tab)
			now := t0
			step := func(what string, wantNews int, write func()) {
				t.Helper()
				now = now.Add(50 * time.Millisecond)
				write()
				_, st, err := v.Sync(ctx, now)
				if err != nil {
					t.Fatal(err)
				}
				if st.News != wantNews {
					t.Errorf("%s: News = %d, want %d (stats %+v)", what, st.News, wantNews, st)
				}
			}
			at := func(l loadtable.NodeLoad) loadtable.NodeLoad { l.At = now; return l }
			step("first read", 2, func() { mustReport(t, tab, at(edge("a", 10, 100)), at(edge("b", 10, 100))) })
			step("nothing written", 0, func() {})
			step("keep-alives", 0, func() { mustReport(t, tab, at(edge("a", 10, 100)), at(edge("b", 11, 100))) })
			step("a moved by a step", 1, func() { mustReport(t, tab, at(edge("a", 40, 100))) })
			drained := edge("b", 11, 100)
			drained.Draining = true
			step("b drained", 1, func() { mustReport(t, tab, at(drained)) })
			step("c came", 1, func() { mustReport(t, tab, at(edge("c", 0, 100))) })
			step("c removed", 1, func() {
				if err := tab.Remove(ctx, "c"); err != nil {
					t.Fatal(err)
				}
			})
			now = now.Add(5 * time.Second) // the next read is whole
			step("whole read, unchanged", 0, func() {})
			now = now.Add(5 * time.Second)
			step("whole read, a removed", 1, func() {
				if err := tab.Remove(ctx, "a"); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
