package loadtable_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
)

var (
	t0           = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	errTableDown = errors.New("load table down")
)

func edge(id string, conns, capacity int) loadtable.NodeLoad {
	return loadtable.NodeLoad{ID: id, Kind: loadtable.KindEdge, Addr: "ws://" + id, Conns: conns, Capacity: capacity}
}

func TestMemoryTable(t *testing.T) {
	ctx := context.Background()
	table := loadtable.NewMemoryTable()
	if err := table.Report(ctx, loadtable.NodeLoad{}); !errors.Is(err, loadtable.ErrNoID) {
		t.Fatalf("Report without id: err = %v", err)
	}
	for _, l := range []loadtable.NodeLoad{
		{ID: "b", Kind: loadtable.KindEdge, Conns: 1},
		{ID: "a", Kind: loadtable.KindIngest},
		{ID: "b", Kind: loadtable.KindEdge, Conns: 2},
	} {
		if err := table.Report(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	got, err := table.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" || got[1].Conns != 2 {
		t.Fatalf("Snapshot = %+v", got)
	}
	if err := table.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got, _ := table.Snapshot(ctx); len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("after Remove: %+v", got)
	}
}

func TestReporterReportsAndRemovesOnStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	table := loadtable.NewMemoryTable()
	clk := clock.NewFake(t0)
	var calls atomic.Int64
	r := loadtable.Reporter{
		Table:    table,
		Interval: time.Millisecond,
		Load:     func() loadtable.NodeLoad { calls.Add(1); return edge("e1", 3, 100) },
		Now:      clk.Now,
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	got, err := table.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "e1" || !got[0].At.Equal(t0) || got[0].Conns != 3 {
		t.Fatalf("table = %+v, want e1 stamped with the reporter's clock", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := table.Snapshot(context.Background()); len(got) != 0 {
		t.Fatalf("table after stop = %+v, want the node removed", got)
	}
}

func TestMemoryTablePrune(t *testing.T) {
	tab := loadtable.NewMemoryTable()
	ctx := context.Background()
	for i, at := range []time.Time{t0.Add(-2 * time.Minute), t0} {
		if err := tab.Report(ctx, loadtable.NodeLoad{ID: fmt.Sprintf("n%d", i), Kind: loadtable.KindEdge, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := tab.Prune(ctx, t0.Add(-time.Minute)); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	if ls, _ := tab.Snapshot(ctx); len(ls) != 1 || ls[0].ID != "n1" {
		t.Fatalf("left %v", ls)
	}
}
