package loadtable_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/loadtable"
	"danmaku/internal/redisx/redistest"
)

// loadBackend is one Table implementation under test; rdb is set for
// Redis, for the cases about what only Redis can hold (foreign fields).
type loadBackend struct {
	name string
	open func(t *testing.T) (loadtable.Table, redis.UniversalClient)
}

func loadBackends() []loadBackend {
	return []loadBackend{
		{"memory", func(t *testing.T) (loadtable.Table, redis.UniversalClient) {
			return loadtable.NewMemoryTable(), nil
		}},
		{"redis", func(t *testing.T) (loadtable.Table, redis.UniversalClient) {
			rdb := redistest.Client(t)
			return loadtable.NewRedisTable(rdb), rdb
		}},
		{"redis-cluster", func(t *testing.T) (loadtable.Table, redis.UniversalClient) {
			rdb := redistest.Cluster(t)
			return loadtable.NewRedisTable(rdb), rdb
		}},
	}
}

// TestLoadTableConformance runs every Table implementation through the
// same cases, each on an empty table.
func TestLoadTableConformance(t *testing.T) {
	at := time.Date(2030, 5, 1, 20, 0, 0, 123000000, time.UTC)
	full := loadtable.NodeLoad{
		ID: "edge-1", Kind: loadtable.KindEdge, Addr: "ws://10.0.0.1:8080", Line: "telecom", Region: "cn-east",
		Conns: 91234, Capacity: 100000, CPU: 0.625,
		Draining: true, At: at,
	}
	ingestNode := loadtable.NodeLoad{ID: "ingest-1", Kind: loadtable.KindIngest, Addr: "http://10.0.1.1:8081", Conns: 12, At: at}
	cases := []struct {
		name string
		run  func(t *testing.T, tab loadtable.Table, rdb redis.UniversalClient)
	}{
		{"empty", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			wantSnapshot(t, tab)
		}},
		{"report and snapshot, sorted by id", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			b := loadtable.NodeLoad{ID: "b", Kind: loadtable.KindEdge, Addr: "ws://b", At: at}
			a := loadtable.NodeLoad{ID: "a", Kind: loadtable.KindEdge, Addr: "ws://a|with|bars", At: at}
			mustReport(t, tab, ingestNode, b, full, a)
			wantSnapshot(t, tab, a, b, full, ingestNode)
		}},
		{"newest report wins", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			mustReport(t, tab, full)
			newer := full
			newer.Conns, newer.Draining, newer.At = 5, false, at.Add(5*time.Millisecond)
			mustReport(t, tab, newer)
			wantSnapshot(t, tab, newer)
		}},
		{"times are kept to the millisecond", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			l := ingestNode
			l.At = at.Add(999 * time.Microsecond)
			mustReport(t, tab, l)
			wantSnapshot(t, tab, ingestNode)
		}},
		{"report without id", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			if err := tab.Report(context.Background(), loadtable.NodeLoad{Addr: "ws://x"}); !errors.Is(err, loadtable.ErrNoID) {
				t.Fatalf("Report without id: %v, want ErrNoID", err)
			}
			wantSnapshot(t, tab)
		}},
		{"remove", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			mustReport(t, tab, full, ingestNode)
			for _, id := range []string{"edge-1", "edge-1", "never-reported"} {
				if err := tab.Remove(context.Background(), id); err != nil {
					t.Fatalf("Remove(%s): %v", id, err)
				}
			}
			wantSnapshot(t, tab, ingestNode)
			mustReport(t, tab, full) // back after a restart
			wantSnapshot(t, tab, full, ingestNode)
		}},
		{"changes since a cursor", func(t *testing.T, tab loadtable.Table, rdb redis.UniversalClient) {
			cr := tab.(loadtable.ChangeReader)
			ctx := context.Background()
			mustReport(t, tab, full, ingestNode)
			ch, cur, err := cr.Changes(ctx, nil)
			if err != nil || len(ch.Loads) != 2 || len(ch.Reset) != cr.Shards() || len(cur) != cr.Shards() {
				t.Fatalf("first read: %+v, %v, %v; want both nodes, every shard reset", ch, cur, err)
			}
			// Nothing new: nothing read.
			ch, cur, err = cr.Changes(ctx, cur)
			if err != nil || len(ch.Loads)+len(ch.Removed)+len(ch.Reset) != 0 || ch.Bytes != 0 {
				t.Fatalf("idle read: %+v, %v", ch, err)
			}
			// One changes, one goes: just those.
			newer := ingestNode
			newer.Conns = 13
			mustReport(t, tab, newer)
			if err := tab.Remove(ctx, "edge-1"); err != nil {
				t.Fatal(err)
			}
			ch, _, err = cr.Changes(ctx, cur)
			if err != nil || len(ch.Reset) != 0 || len(ch.Loads) != 1 || ch.Loads[0].Conns != 13 ||
				!reflect.DeepEqual(ch.Removed, []string{"edge-1"}) || (rdb != nil && ch.Bytes == 0) {
				t.Fatalf("delta read: %+v, %v; want ingest-1 changed and edge-1 removed", ch, err)
			}
		}},
		{"online counts", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			ot := tab.(loadtable.OnlineTable)
			ctx := context.Background()
			rooms := map[string]int{"concert": 90000, "backstage": 1234}
			if err := ot.ReportOnline(ctx, "edge-1", rooms); err != nil {
				t.Fatal(err)
			}
			if err := ot.ReportOnline(ctx, "edge-2", map[string]int{"concert": 5}); err != nil {
				t.Fatal(err)
			}
			rooms["concert"] = 1 // the reporter's map changes after the report
			if err := ot.ReportOnline(ctx, "", rooms); !errors.Is(err, loadtable.ErrNoID) {
				t.Fatalf("ReportOnline without node: %v", err)
			}
			want := map[string]map[string]int{"edge-1": {"concert": 90000, "backstage": 1234}, "edge-2": {"concert": 5}}
			if got, err := ot.Online(ctx); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("Online = %v, %v; want %v", got, err, want)
			}
			if err := ot.ReportOnline(ctx, "edge-2", nil); err != nil { // its last viewer left
				t.Fatal(err)
			}
			if err := ot.RemoveOnline(ctx, "edge-1"); err != nil {
				t.Fatal(err)
			}
			if got, err := ot.Online(ctx); err != nil || len(got["edge-2"]) != 0 || got["edge-1"] != nil {
				t.Fatalf("Online after removal = %v, %v", got, err)
			}
			// The load table knows nothing of them.
			wantSnapshot(t, tab)
		}},
		{"prune", func(t *testing.T, tab loadtable.Table, _ redis.UniversalClient) {
			ctx := context.Background()
			fresh := loadtable.NodeLoad{ID: "fresh", Kind: loadtable.KindIngest, At: at.Add(time.Second)}
			mustReport(t, tab, full, ingestNode, fresh)
			if err := tab.(loadtable.OnlineTable).ReportOnline(ctx, "edge-1", map[string]int{"r": 1}); err != nil {
				t.Fatal(err)
			}
			n, err := tab.(loadtable.Pruner).Prune(ctx, at.Add(time.Millisecond))
			if err != nil || n != 2 {
				t.Fatalf("Prune = %d, %v; want 2 removed", n, err)
			}
			wantSnapshot(t, tab, fresh)
			if on, _ := tab.(loadtable.OnlineTable).Online(ctx); len(on) != 0 {
				t.Fatalf("online counts of a pruned node kept: %v", on)
			}
		}},
		{"undecodable records are skipped and pruned", func(t *testing.T, tab loadtable.Table, rdb redis.UniversalClient) {
			mustReport(t, tab, full)
			if rdb == nil {
				return // only a shared store holds what another writer put there
			}
			ctx := context.Background()
			// In edge-1's shard and logged, as a broken writer would.
			nodes, log := loadtable.ShardKeysForTest("edge-1")
			for _, f := range []struct{ id, rec string }{{"junk", "{not a record"}, {"v9", "v9|e|1|2|3|0|0|||ws://x"}} {
				if err := rdb.HSet(ctx, nodes, f.id, f.rec).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{f.id, f.rec}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			rdb.HSet(ctx, "danmaku:{online:0}", "broken", "room=x")
			wantSnapshot(t, tab, full)
			rt := tab.(*loadtable.RedisTable)
			if got := rt.Skipped(); got != 2 {
				t.Fatalf("Skipped() = %d, want 2", got)
			}
			if on, err := rt.Online(ctx); err != nil || len(on) != 0 || rt.Skipped() != 3 {
				t.Fatalf("Online = %v, %v, skipped %d; want the bad record left out", on, err, rt.Skipped())
			}
			// Prune drops them and the reports older than the cutoff.
			fresh := loadtable.NodeLoad{ID: "fresh", Kind: loadtable.KindIngest, At: at.Add(time.Second)}
			mustReport(t, tab, ingestNode, fresh)
			n, err := rt.Prune(ctx, at.Add(time.Millisecond))
			if err != nil || n != 4 {
				t.Fatalf("Prune = %d, %v; want 4 removed", n, err)
			}
			wantSnapshot(t, tab, fresh)
		}},
		{"a record that cannot be written", func(t *testing.T, tab loadtable.Table, rdb redis.UniversalClient) {
			if rdb == nil {
				return // the memory table keeps reports as they are
			}
			for _, l := range []loadtable.NodeLoad{
				{ID: "x", Kind: "router"},
				{ID: "x", Kind: loadtable.KindEdge, Line: "a|b"},
				{ID: "x", Kind: loadtable.KindEdge, Conns: -1},
			} {
				if err := tab.Report(context.Background(), l); err == nil {
					t.Errorf("Report(%+v) accepted", l)
				}
			}
			wantSnapshot(t, tab)
		}},
	}
	for _, b := range loadBackends() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					tab, rdb := b.open(t)
					c.run(t, tab, rdb)
				})
			}
		})
	}
}

func mustReport(t *testing.T, tab loadtable.Table, loads ...loadtable.NodeLoad) {
	t.Helper()
	for _, l := range loads {
		if err := tab.Report(context.Background(), l); err != nil {
			t.Fatalf("Report(%s): %v", l.ID, err)
		}
	}
}

// wantSnapshot checks the table's snapshot against want, in order. Times are
// compared as instants: a shared table does not keep the location.
func wantSnapshot(t *testing.T, tab loadtable.Table, want ...loadtable.NodeLoad) {
	t.Helper()
	got, err := tab.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		g, w := got[i], want[i]
		same = g.At.Equal(w.At)
		g.At, w.At = time.Time{}, time.Time{}
		same = same && reflect.DeepEqual(g, w)
	}
	if !same {
		t.Fatalf("Snapshot =\n%+v\nwant\n%+v", got, want)
	}
}
