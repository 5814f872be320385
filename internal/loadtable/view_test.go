package loadtable_test

import (
	"danmaku/internal/loadtable"

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
