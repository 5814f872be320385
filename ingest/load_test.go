package ingest

import (
	"bytes"
	"context"
	"danmaku/internal/testwait"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/hist"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
)

// The load runs of docs/benchmarks.md ("Upload path"): several ingest
// nodes in this process, each with its own Redis client as separate
// processes would have, driven in-process (no HTTP: what is measured is
// the nodes' Redis work and the admission, not the loopback). They run only
// with DANMAKU_LOAD set (make bench-ingest); each takes under a minute.

func requireLoad(t *testing.T) {
	t.Helper()
	if os.Getenv("DANMAKU_LOAD") == "" {
		t.Skip("a load run: set DANMAKU_LOAD=1 (make bench-ingest)")
	}
}

// loadNode is one ingest node of a load run.
type loadNode struct {
	srv    *Server
	engine http.Handler
	reg    *prometheus.Registry
	addr   string
}

// loadRig is a set of ingest nodes sharing one Redis and one keyring.
type loadRig struct {
	ring  *auth.Keyring
	nodes []*loadNode
	store *stream.RedisStore // the first node's, for reading back
	room  string
}

// waitPeers waits until every node counts every node live (ingestNodes,
// from the load table): a condition, where a fixed 1.5 s sleep was a guess
// that a loaded machine could miss.
func (r *loadRig) waitPeers(t *testing.T) {
	t.Helper()
	testwait.For(t, "the nodes to see each other", func() bool {
		for _, n := range r.nodes {
			if n.srv.liveIngestNodes() != len(r.nodes) {
				return false
			}
		}
		return true
	})
}

func newLoadRig(t *testing.T, rc redisx.Config, nodes int, room string, capacity, refill float64) *loadRig {
	t.Helper()
	secrets := auth.NewMemorySecrets()
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: testMaster, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: testMaster, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := center.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ring.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// The load table is in memory: the nodes' reports (every 5 ms) would
	// be Redis traffic of their own, not the upload path's.
	table := loadtable.NewMemoryTable()
	if rc.IOTimeout == 0 {
		rc.IOTimeout = 500 * time.Millisecond
	}
	r := &loadRig{ring: ring, room: room}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range nodes {
		rdb := redistest.Dial(t, rc)
		rs, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		gate, err := NewRedisRoomGate(RedisRoomGateConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		gifts, err := NewRedisGiftLog(RedisGiftLogConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		n := &loadNode{reg: prometheus.NewRegistry(), addr: "http://ingest-" + strconv.Itoa(i+1)}
		n.srv, err = New(Config{
			Streams: rs, Keyring: ring, Addr: n.addr, Load: table, Gate: gate, Gifts: gifts,
			RoomBase: capacity, RoomCeiling: capacity, RoomRefill: refill,
			Registerer: n.reg, Clock: clock.Real{}, Logger: discard,
		})
		if err != nil {
			t.Fatal(err)
		}
		e := httpx.NewEngine(httpx.EngineConfig{Role: "ingest", Logger: discard, Gatherer: n.reg})
		n.srv.Register(e)
		n.engine = e
		wg.Go(func() { _ = n.srv.Run(runCtx) })
		r.nodes = append(r.nodes, n)
		if i == 0 {
			r.store = rs
		}
	}
	return r
}

// tokens signs one token per user, user i bound to node i mod nodes (the
// allocator's choice: each user sends to one node).
func (r *loadRig) tokens(t *testing.T, users int) []string {
	t.Helper()
	out := make([]string, users)
	for i := range out {
		tok, _, err := r.ring.Sign(auth.Claims{
			Room: r.room, Nick: "n", Role: auth.RoleViewer, Addrs: []string{r.nodes[i%len(r.nodes)].addr}, Ingests: 1,
			RegisteredClaims: jwt.RegisteredClaims{Subject: "user-" + strconv.Itoa(i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = tok
	}
	return out
}

// loadResult is what a paced run saw.
type loadResult struct {
	attempts  int64
	codes     sync.Map // status → *atomic.Int64
	latencies []time.Duration
	latMu     sync.Mutex
	// early503 counts 503s answered by a handler that ran for less than
	// the hold: refusals the hold does not explain. longestServe is the
	// longest handler run (ns), apart from the driver's own backlog.
	early503     atomic.Int64
	longestServe atomic.Int64
}

func (lr *loadResult) code(status int) {
	v, _ := lr.codes.LoadOrStore(status, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (lr *loadResult) count(status int) int64 {
	v, ok := lr.codes.Load(status)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (lr *loadResult) errors() int64 {
	var n int64
	lr.codes.Range(func(k, v any) bool {
		if k.(int) != http.StatusOK {
			n += v.(*atomic.Int64).Load()
		}
		return true
	})
	return n
}

// pct returns the p-th percentile latency (0 < p ≤ 100).
func (lr *loadResult) pct(p float64) time.Duration {
	lr.latMu.Lock()
	defer lr.latMu.Unlock()
	return hist.Quantile(lr.latencies, p/100)
}

// drive sends comments at rate(elapsed) attempts per second for d, open
// loop (a request is sent when due, whatever the earlier ones do, and its
// latency counts from when it was due), each from a user at random, each
// comment's text unique. It returns when every request is answered.
func (r *loadRig) drive(tokens []string, d time.Duration, rate func(elapsed time.Duration) float64) *loadResult {
	lr := &loadResult{}
	var (
		wg   sync.WaitGroup
		seq  atomic.Int64
		sent float64
	)
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	last := start
	for now := range tick.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		sent += rate(el) * now.Sub(last).Seconds()
		last = now
		for ; sent >= 1; sent-- {
			i := seq.Add(1)
			due := now
			wg.Go(func() {
				// A user at random: users in lockstep (round robin) would
				// spend and refill their buckets in waves.
				u := rand.IntN(len(tokens))
				tok := tokens[u]
				n := r.nodes[u%len(r.nodes)]
				req := httptest.NewRequest(http.MethodPost, barragePath(r.room), bytes.NewReader(fmt.Appendf(nil, `{"text":"c-%d-%d-%d"}`, i, due.UnixMilli(), u)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				rec := httptest.NewRecorder()
				start := time.Now()
				n.engine.ServeHTTP(rec, req)
				served := time.Since(start)
				lat := time.Since(due)
				lr.code(rec.Code)
				if rec.Code == http.StatusServiceUnavailable && served < defaultHold {
					lr.early503.Add(1)
				}
				for old := lr.longestServe.Load(); int64(served) > old && !lr.longestServe.CompareAndSwap(old, int64(served)); old = lr.longestServe.Load() {
				}
				lr.latMu.Lock()
				lr.latencies = append(lr.latencies, lat)
				lr.latMu.Unlock()
			})
		}
	}
	wg.Wait()
	lr.attempts = seq.Load()
	return lr
}

// stored returns the room's Barrage lane: every comment text, in order.
func (r *loadRig) stored(t *testing.T) []string {
	t.Helper()
	var texts []string
	after := "0"
	for {
		es, err := r.store.Read(context.Background(), stream.Key{Room: r.room, Lane: stream.Barrage}, after, 10_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return texts
		}
		for _, e := range es {
			texts = append(texts, e.Text)
		}
		after = es[len(es)-1].ID
	}
}

// accepted sums the nodes' stored-barrage counters.
func (r *loadRig) accepted() float64 {
	var n float64
	for _, node := range r.nodes {
		n += testutil.ToFloat64(node.srv.accepted.WithLabelValues("barrage", event.OtherLabel, event.OtherLabel))
	}
	return n
}

func (r *loadRig) flushes() float64 {
	var n float64
	for _, node := range r.nodes {
		for _, res := range []string{"ok", "replayed", "error"} {
			n += testutil.ToFloat64(node.srv.writer.m.flushes.WithLabelValues(res))
		}
	}
	return n
}

// redisStats reads total_reads_processed and total_commands_processed.
func redisStats(t *testing.T, rdb redis.UniversalClient) (reads, cmds float64) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "total_reads_processed":
			reads = f
		case "total_commands_processed":
			cmds = f
		}
	}
	return reads, cmds
}

// TestLoadRoundTrips is acceptance 2 of the upload path: three ingest
// nodes, one room limited to 1,200 comments/s, offered 1,500/s for 20 s.
// Redis round trips per 1,000 admitted comments are counted on both sides:
// Redis's own count of socket reads (total_reads_processed, less the rate
// the same nodes cause idle, and less the reads of the measuring client),
// and the nodes' flushes.
func TestLoadRoundTrips(t *testing.T) {
	requireLoad(t)
	const (
		nodes    = 3
		refill   = 1200.0
		capacity = 200.0
		offered  = 1500.0
		users    = 6000
		run      = 20 * time.Second
		idle     = 5 * time.Second
	)
	addr := testenv.Redis(t)
	probe := redistest.Dial(t, redisx.Config{URL: addr})
	r := newLoadRig(t, redisx.Config{URL: addr}, nodes, "rt-room", capacity, refill)
	tokens := r.tokens(t, users)

	// Idle: the nodes run (load sync, sweeps) and nothing is sent.
	r0, c0 := redisStats(t, probe)
	time.Sleep(idle) // the idle period whose Redis calls are counted: a real duration, not synchronisation
	r1, c1 := redisStats(t, probe)
	// Each INFO is one read and one command of the probe itself.
	idleReads, idleCmds := (r1-r0-1)/idle.Seconds(), (c1-c0-1)/idle.Seconds()

	f0 := r.flushes()
	start := time.Now()
	res := r.drive(tokens, run, func(time.Duration) float64 { return offered })
	took := time.Since(start)
	r2, c2 := redisStats(t, probe)
	cmdstats, err := probe.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stored := len(r.stored(t))
	accepted := r.accepted()
	reads := r2 - r1 - 1 - idleReads*took.Seconds()
	cmds := c2 - c1 - 1 - idleCmds*took.Seconds()
	flushes := r.flushes() - f0
	admittedRate := float64(stored) / took.Seconds()
	t.Logf("offered %d in %.2f s (%.0f/s), answered 200: %d, errors: %d", res.attempts, took.Seconds(), float64(res.attempts)/took.Seconds(), res.count(200), res.errors())
	t.Logf("stored %d (%.0f/s; configured %.0f/s, burst %.0f: expected %.0f/s over the run), counted accepted %.0f", stored, admittedRate, refill, capacity, refill+capacity/took.Seconds(), accepted)
	t.Logf("Redis side: %.1f reads and %.1f commands per 1,000 admitted (idle %.1f reads/s, %.1f commands/s subtracted)", reads/float64(stored)*1000, cmds/float64(stored)*1000, idleReads, idleCmds)
	t.Logf("client side: %.0f flushes = %.1f round trips per 1,000 admitted", flushes, flushes/float64(stored)*1000)
	t.Logf("latency from due: p50 %v p99 %v max %v", res.pct(50), res.pct(99), res.pct(100))
	for line := range strings.SplitSeq(cmdstats, "\r\n") {
		if strings.HasPrefix(line, "cmdstat_") {
			t.Logf("  %s", line)
		}
	}
	if res.errors() > 0 {
		t.Errorf("%d error answers", res.errors())
	}
	if float64(stored) != accepted {
		t.Errorf("stored %d, but the nodes counted %.0f accepted", stored, accepted)
	}
}

// TestLoadRedisOutage is acceptance 4: three nodes, one room limited to
// 1,200/s, offered 1,500/s for 25 s; Redis is killed (SIGKILL) 5 s in and
// started again 10 s later (append-only, fsync always, as a managed Redis).
// While it is away each node admits by its share (1,200/3 per second);
// afterwards every comment a node counted as stored is in the stream, once.
func TestLoadRedisOutage(t *testing.T) {
	requireLoad(t)
	const (
		nodes    = 3
		refill   = 1200.0
		capacity = 200.0
		offered  = 1500.0
		users    = 6000
		run      = 25 * time.Second
		killAt   = 5 * time.Second
		downFor  = 10 * time.Second
	)
	addr, srv := testenv.RedisRestartable(t)
	r := newLoadRig(t, redisx.Config{URL: addr}, nodes, "outage-room", capacity, refill)
	tokens := r.tokens(t, users)
	// The nodes see each other in the load table (the share divides by
	// the live ingest nodes).
	r.waitPeers(t)

	var killed, restarted time.Time
	go func() {
		time.Sleep(killAt) // when in the load Redis is killed: a phase of the scenario
		killed = time.Now()
		srv.Kill()
		time.Sleep(downFor) // Redis stays down this long: the outage under test
		srv.Start()
		restarted = time.Now()
	}()
	res := r.drive(tokens, run, func(time.Duration) float64 { return offered })
	texts := r.stored(t)
	accepted := r.accepted()
	seen := make(map[string]bool, len(texts))
	dups := 0
	// Per node, the comments stored that were sent while Redis was away
	// (a second of margin at each end, for the in-flight flushes).
	from, to := killed.Add(time.Second).UnixMilli(), restarted.Add(-time.Second).UnixMilli()
	perNode := make([]int, nodes)
	for _, s := range texts {
		if seen[s] {
			dups++
		}
		seen[s] = true
		var i, ms, u int64
		if _, err := fmt.Sscanf(s, "c-%d-%d-%d", &i, &ms, &u); err != nil {
			t.Fatalf("stored text %q", s)
		}
		if ms >= from && ms < to {
			perNode[int(u)%nodes]++
		}
	}
	window := float64(to-from) / 1000
	for i, n := range r.nodes {
		t.Logf("node %d: live ingest nodes %d, dropped by the share %.0f, by the room bucket %.0f", i+1, n.srv.liveIngestNodes(),
			testutil.ToFloat64(n.srv.overflows.WithLabelValues("room_share")), testutil.ToFloat64(n.srv.overflows.WithLabelValues("room")))
	}
	t.Logf("offered %d, answered 200: %d, errors: %d (by status: 503 %d)", res.attempts, res.count(200), res.errors(), res.count(503))
	t.Logf("stored %d, distinct %d, duplicates %d; nodes counted %.0f stored", len(texts), len(seen), dups, accepted)
	share := refill / nodes
	for i, n := range perNode {
		rate := float64(n) / window
		t.Logf("node %d during the outage (%.1f s): %.0f/s admitted, share %.0f/s (%+.1f%%)", i+1, window, rate, share, (rate/share-1)*100)
		if rate < share*0.9 || rate > share*1.1 {
			t.Errorf("node %d admitted %.0f/s while Redis was away, share %.0f/s", i+1, rate, share)
		}
	}
	t.Logf("latency from due: p50 %v p99 %v max %v", res.pct(50), res.pct(99), res.pct(100))
	if dups > 0 || float64(len(texts)) != accepted {
		t.Errorf("stored %d (%d duplicates), nodes counted %.0f", len(texts), dups, accepted)
	}
	if res.errors() > 0 {
		t.Errorf("%d error answers", res.errors())
	}
}

// TestLoadPulse is acceptance 3 driven in-process: from nothing to 38,000
// attempts/s for 10 s from 10,000 users into one room served by three
// nodes (room bucket 1,200/s, burst 1,200: a second's refill, as a room
// with ~8,000 viewers online gets by default). After the first second the room
// admits its refill rate each second; no request gets an error.
func TestLoadPulse(t *testing.T) {
	requireLoad(t)
	const (
		nodes    = 3
		refill   = 1200.0
		capacity = 1200.0
		users    = 10_000
		run      = 10 * time.Second
	)
	rate := 38_000.0
	if s := os.Getenv("DANMAKU_PULSE_RATE"); s != "" {
		rate, _ = strconv.ParseFloat(s, 64)
	}
	addr := testenv.Redis(t)
	r := newLoadRig(t, redisx.Config{URL: addr}, nodes, "pulse-room", capacity, refill)
	tokens := r.tokens(t, users)
	r.waitPeers(t) // the nodes see each other
	start := time.Now()
	// The pulse goes on a window past the last second judged: the tokens
	// of a second's last window are taken at the next flush slot, which
	// for the final second would fall after the offered load stopped.
	res := r.drive(tokens, run+defaultWindow, func(time.Duration) float64 { return rate })
	took := time.Since(start)
	// Admitted per second, by the time the stream stored them (their ids).
	perSec := map[int64]int{}
	after := "0"
	for {
		es, err := r.store.Read(context.Background(), stream.Key{Room: r.room, Lane: stream.Barrage}, after, 10_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			ms, _, _ := strings.Cut(e.ID, "-")
			v, _ := strconv.ParseInt(ms, 10, 64)
			perSec[(v-start.UnixMilli())/1000]++
		}
		after = es[len(es)-1].ID
	}
	t.Logf("attempts %d in %.2f s: %.0f/s (asked %.0f/s); answered 200: %d, errors: %d", res.attempts, took.Seconds(), float64(res.attempts)/took.Seconds(), rate, res.count(200), res.errors())
	t.Logf("latency from due: p50 %v p90 %v p99 %v max %v", res.pct(50), res.pct(90), res.pct(99), res.pct(100))
	var secs []string
	worst := 0.0
	for s := int64(0); s < int64(run/time.Second); s++ {
		secs = append(secs, strconv.Itoa(perSec[s]))
		if s >= 1 {
			worst = max(worst, abs(float64(perSec[s])/refill-1))
		}
	}
	t.Logf("admitted per second: %s (refill %.0f/s); worst second after the first: %.1f%% off", strings.Join(secs, " "), refill, worst*100)
	if res.errors() > 0 {
		t.Errorf("%d error answers", res.errors())
	}
	if worst > 0.05 {
		t.Errorf("a second after the first admitted %.1f%% off the refill rate", worst*100)
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
