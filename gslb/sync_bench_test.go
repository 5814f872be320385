package gslb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/gslb"
	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
	"danmaku/internal/testenv"
)

// BenchmarkSync measures one allocator sync (SyncOnce: read the load table
// from a real Redis, publish a snapshot) and the bytes it reads from Redis
// (bytes/sync, counted on the allocator's connections), at nodes × rooms =
// 10×10, 100×100, 1,000×10, for the table as it was (before: one hash of
// JSON reports carrying each edge's per-room online counts, read whole
// every sync) and as it is (after: sharded text records, read by what
// changed; online counts in their own table, which syncs do not read),
// both in the same run. changed=all re-reports every node between two
// syncs (the worst case, and what a show cost when every report that moved
// by 1 % of CPU or a thousandth of capacity was written: a loaded node
// wrote every few milliseconds), changed=10% a tenth of them,
// changed=none none (a quiet table), changed=loaded every node under a
// show's noisy load reporting through its ReportGate (loadedShow; after
// only): rows/sync is how many reports each sync then reads.
func BenchmarkSync(b *testing.B) {
	opts := &redis.Options{Addr: testenv.Redis(b)}
	writer := redis.NewClient(opts)
	b.Cleanup(func() { _ = writer.Close() })
	var read atomic.Int64
	ropts := *opts
	ropts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, read: &read}, nil
	}
	reader := redis.NewClient(&ropts)
	b.Cleanup(func() { _ = reader.Close() })

	for _, size := range []struct{ nodes, rooms int }{{10, 10}, {100, 100}, {1000, 10}} {
		for _, impl := range []string{"before", "after"} {
			for _, changed := range []string{"all", "10%", "none", "loaded"} {
				if changed == "loaded" && impl == "before" {
					continue // the reporters' judgement is the new table's
				}
				name := fmt.Sprintf("%dx%d/%s/changed=%s", size.nodes, size.rooms, impl, changed)
				b.Run(name, func(b *testing.B) {
					ctx := context.Background()
					if err := writer.FlushAll(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					var wt, rt loadtable.Table
					if impl == "before" {
						wt, rt = &legacyTable{writer}, &legacyTable{reader}
					} else {
						wt, rt = loadtable.NewRedisTable(writer), loadtable.NewRedisTable(reader)
					}
					clk := clock.NewFake(time.Now())
					alloc, err := gslb.NewAllocator(gslb.AllocatorConfig{Table: rt, Clock: clk})
					if err != nil {
						b.Fatal(err)
					}
					rooms := make(map[string]int, size.rooms)
					for r := range size.rooms {
						rooms[fmt.Sprintf("room-%03d", r)] = 100 + r
					}
					report := func(round, every int) {
						for n := range size.nodes {
							if (n+round)%every != 0 {
								continue
							}
							l := loadtable.NodeLoad{
								ID: fmt.Sprintf("edge-%04d", n), Kind: loadtable.KindEdge,
								Addr:  fmt.Sprintf("wss://edge-%04d.danmaku.example:443", n),
								Conns: 1000 + n + round, Capacity: 100_000, CPU: 0.42, At: clk.Now(),
							}
							if lt, ok := wt.(*legacyTable); ok {
								if err := lt.reportRooms(ctx, l, rooms); err != nil {
									b.Fatal(err)
								}
								continue
							}
							if err := wt.Report(ctx, l); err != nil {
								b.Fatal(err)
							}
							if round == 0 {
								if err := wt.(loadtable.OnlineTable).ReportOnline(ctx, l.ID, rooms); err != nil {
									b.Fatal(err)
								}
							}
						}
					}
					report(0, 1)
					var show *loadedShow
					if changed == "loaded" {
						show = newLoadedShow(b, wt, size.nodes, clk.Now())
					}
					if err := alloc.SyncOnce(ctx); err != nil { // the first, whole read
						b.Fatal(err)
					}
					read.Store(0)
					b.ResetTimer()
					for i := range b.N {
						switch changed {
						case "all", "10%":
							b.StopTimer()
							if changed == "all" {
								report(i+1, 1)
							} else {
								report(i+1, 10)
							}
							clk.Advance(time.Millisecond) // within the full-read period
							b.StartTimer()
						case "loaded":
							b.StopTimer()
							clk.Advance(5 * time.Millisecond) // a sync's interval
							show.step(b, clk.Now())
							b.StartTimer()
						}
						if err := alloc.SyncOnce(ctx); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(read.Load())/float64(b.N), "bytes/sync")
					if show != nil {
						b.ReportMetric(float64(show.written)/float64(b.N), "rows/sync")
						b.ReportMetric(float64(show.written)/float64(size.nodes)/(5*time.Millisecond*time.Duration(b.N)).Seconds(), "reports/node/s")
					}
					if os.Getenv("SYNC_STATS") != "" {
						fmt.Println(writer.Info(ctx, "commandstats").Val())
					}
				})
			}
		}
	}
}

// loadedShow is every node of a table under a show's load, each reporting
// through its own loadtable.ReportGate as a Reporter does: CPU about 50 %,
// re-sampled every 100 ms with a spread of ±4 points (CPU, not connections,
// bounds its headroom: the noisier of the two); 50,000 of 100,000
// connections, a hundred arriving and leaving every 5 ms. Each node looks
// when its gate says, from a phase of its own.
type loadedShow struct {
	table   loadtable.Table
	rng     *rand.Rand
	nodes   []loadtable.NodeLoad
	gates   []*loadtable.ReportGate
	next    []time.Time // each node's next look
	written int
}

func newLoadedShow(b *testing.B, table loadtable.Table, n int, now time.Time) *loadedShow {
	s := &loadedShow{table: table, rng: rand.New(rand.NewPCG(1, 2))}
	for i := range n {
		id := fmt.Sprintf("edge-%04d", i)
		s.nodes = append(s.nodes, loadtable.NodeLoad{ID: id, Kind: loadtable.KindEdge, Addr: fmt.Sprintf("wss://%s.danmaku.example:443", id), Conns: 50_000, Capacity: 100_000, CPU: 0.5})
		g := loadtable.NewReportGate(0, 0, 0)
		// Each node has been reporting for a while, at its own phase.
		at := now.Add(-time.Duration(s.rng.Int64N(int64(250 * time.Millisecond))))
		l, _ := g.Look(s.nodes[i], at)
		g.Done(l, at, true)
		s.gates = append(s.gates, g)
		s.next = append(s.next, at.Add(g.Wait(at)))
	}
	s.step(b, now)
	s.written = 0
	return s
}

// step moves the show to now: every node due looks, and writes what its
// gate lets through.
func (s *loadedShow) step(b *testing.B, now time.Time) {
	ctx := context.Background()
	resample := now.UnixMilli()/100 != now.Add(-5*time.Millisecond).UnixMilli()/100
	for i := range s.nodes {
		l := &s.nodes[i]
		l.Conns += s.rng.IntN(201) - 100
		if resample {
			l.CPU = 0.46 + 0.08*s.rng.Float64()
		}
		if now.Before(s.next[i]) {
			continue
		}
		g := s.gates[i]
		if r, ok := g.Look(*l, now); ok {
			r.At = now
			if err := s.table.Report(ctx, r); err != nil {
				b.Fatal(err)
			}
			g.Done(r, now, true)
			s.written++
		}
		s.next[i] = now.Add(g.Wait(now))
	}
}

// countingConn counts the bytes read from Redis.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// legacyTable is the load table as it was before the sharded one, kept
// here as the benchmark's baseline: one hash, danmaku:load, field = node
// id, value = the report as JSON with the edge's per-room online counts,
// read whole (HGETALL) at every sync.
type legacyTable struct{ rdb redis.UniversalClient }

type legacyLoad struct {
	loadtable.NodeLoad
	Rooms map[string]int `json:"rooms,omitempty"`
}

const legacyKey = "danmaku:load"

func (t *legacyTable) reportRooms(ctx context.Context, l loadtable.NodeLoad, rooms map[string]int) error {
	v, err := json.Marshal(legacyLoad{l, rooms})
	if err != nil {
		return err
	}
	return t.rdb.HSet(ctx, legacyKey, l.ID, v).Err()
}

func (t *legacyTable) Report(ctx context.Context, l loadtable.NodeLoad) error {
	return t.reportRooms(ctx, l, nil)
}

func (t *legacyTable) Snapshot(ctx context.Context) ([]loadtable.NodeLoad, error) {
	m, err := t.rdb.HGetAll(ctx, legacyKey).Result()
	if err != nil {
		return nil, err
	}
	out := make([]loadtable.NodeLoad, 0, len(m))
	for id, v := range m {
		var l legacyLoad
		if err := json.Unmarshal([]byte(v), &l); err != nil || l.ID != id {
			continue
		}
		out = append(out, l.NodeLoad)
	}
	slices.SortFunc(out, func(a, b loadtable.NodeLoad) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (t *legacyTable) Remove(ctx context.Context, id string) error {
	return t.rdb.HDel(ctx, legacyKey, id).Err()
}
