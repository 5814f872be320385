package gslb_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/gslb"
	"danmaku/internal/redisx/redistest"
)

// loadBackend is one LoadTable implementation under test; rdb is set for
// Redis, for the cases about what only Redis can hold (foreign fields).
type loadBackend struct {
	name string
	open func(t *testing.T) (gslb.LoadTable, redis.UniversalClient)
}

func loadBackends() []loadBackend {
	return []loadBackend{
		{"memory", func(t *testing.T) (gslb.LoadTable, redis.UniversalClient) {
			return gslb.NewMemoryLoadTable(), nil
		}},
		{"redis", func(t *testing.T) (gslb.LoadTable, redis.UniversalClient) {
			rdb := redistest.Client(t)
			return gslb.NewRedisLoadTable(rdb), rdb
		}},
		{"redis-cluster", func(t *testing.T) (gslb.LoadTable, redis.UniversalClient) {
			rdb := redistest.Cluster(t)
			return gslb.NewRedisLoadTable(rdb), rdb
		}},
	}
}

// TestLoadTableConformance runs every LoadTable implementation through the
// same cases, each on an empty table.
func TestLoadTableConformance(t *testing.T) {
	at := time.Date(2030, 5, 1, 20, 0, 0, 123456789, time.UTC)
	full := gslb.NodeLoad{
		ID: "edge-1", Kind: gslb.KindEdge, Addr: "ws://10.0.0.1:8080", Line: "telecom",
		Conns: 91234, Capacity: 100000, CPU: 0.625,
		Rooms:    map[string]int{"concert": 90000, "backstage": 1234},
		Draining: true, At: at,
	}
	ingestNode := gslb.NodeLoad{ID: "ingest-1", Kind: gslb.KindIngest, Addr: "http://10.0.1.1:8081", Conns: 12, At: at}
	cases := []struct {
		name string
		run  func(t *testing.T, tab gslb.LoadTable, rdb redis.UniversalClient)
	}{
		{"empty", func(t *testing.T, tab gslb.LoadTable, _ redis.UniversalClient) {
			wantSnapshot(t, tab)
		}},
		{"report and snapshot, sorted by id", func(t *testing.T, tab gslb.LoadTable, _ redis.UniversalClient) {
			b := gslb.NodeLoad{ID: "b", Kind: gslb.KindEdge, Addr: "ws://b", At: at}
			a := gslb.NodeLoad{ID: "a", Kind: gslb.KindEdge, Addr: "ws://a", At: at}
			mustReport(t, tab, ingestNode, b, full, a)
			wantSnapshot(t, tab, a, b, full, ingestNode)
		}},
		{"newest report wins", func(t *testing.T, tab gslb.LoadTable, _ redis.UniversalClient) {
			mustReport(t, tab, full)
			newer := full
			newer.Conns, newer.Draining, newer.Rooms, newer.At = 5, false, nil, at.Add(5*time.Millisecond)
			mustReport(t, tab, newer)
			wantSnapshot(t, tab, newer)
		}},
		{"rooms round trip and are copied", func(t *testing.T, tab gslb.LoadTable, _ redis.UniversalClient) {
			l := full
			l.Rooms = maps.Clone(full.Rooms)
			mustReport(t, tab, l)
			l.Rooms["concert"] = 1 // the reporter's map changes after the report
			wantSnapshot(t, tab, full)
		}},
		{"report without id", func(t *testing.T, tab gslb.LoadTable, _ redis.UniversalClient) {
			if err := tab.Report(context.Background(), gslb.NodeLoad{Addr: "ws://x"}); !errors.Is(err, gslb.ErrNoID) {
				t.Fatalf("Report without id: %v, want ErrNoID", err)
			}
			wantSnapshot(t, tab)
		}},
		{"remove", func(t *testing.T, tab gslb.LoadTable, _ redis.UniversalClient) {
			mustReport(t, tab, full, ingestNode)
			for _, id := range []string{"edge-1", "edge-1", "never-reported"} {
				if err := tab.Remove(context.Background(), id); err != nil {
					t.Fatalf("Remove(%s): %v", id, err)
				}
			}
			wantSnapshot(t, tab, ingestNode)
		}},
		{"undecodable fields are skipped", func(t *testing.T, tab gslb.LoadTable, rdb redis.UniversalClient) {
			mustReport(t, tab, full)
			if rdb == nil {
				return // only a shared store holds what another writer put there
			}
			ctx := context.Background()
			rdb.HSet(ctx, "danmaku:load", "junk", "{not json", "other-id", `{"id":"edge-1"}`)
			wantSnapshot(t, tab, full)
			rt := tab.(*gslb.RedisLoadTable)
			if got := rt.Skipped(); got != 2 {
				t.Fatalf("Skipped() = %d, want 2", got)
			}
			// Prune drops them and the reports older than the cutoff.
			mustReport(t, tab, ingestNode, gslb.NodeLoad{ID: "fresh", At: at.Add(time.Second)})
			n, err := rt.Prune(ctx, at.Add(time.Millisecond))
			if err != nil || n != 4 {
				t.Fatalf("Prune = %d, %v; want 4 removed", n, err)
			}
			wantSnapshot(t, tab, gslb.NodeLoad{ID: "fresh", At: at.Add(time.Second)})
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

func mustReport(t *testing.T, tab gslb.LoadTable, loads ...gslb.NodeLoad) {
	t.Helper()
	for _, l := range loads {
		if err := tab.Report(context.Background(), l); err != nil {
			t.Fatalf("Report(%s): %v", l.ID, err)
		}
	}
}

// wantSnapshot checks the table's snapshot against want, in order. Times are
// compared as instants and an empty Rooms equals a nil one: a report that
// went through JSON keeps neither the location nor the nil.
func wantSnapshot(t *testing.T, tab gslb.LoadTable, want ...gslb.NodeLoad) {
	t.Helper()
	got, err := tab.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		g, w := got[i], want[i]
		same = g.At.Equal(w.At) && maps.Equal(g.Rooms, w.Rooms)
		g.At, w.At, g.Rooms, w.Rooms = time.Time{}, time.Time{}, nil, nil
		same = same && reflect.DeepEqual(g, w)
	}
	if !same {
		t.Fatalf("Snapshot =\n%+v\nwant\n%+v", got, want)
	}
}
