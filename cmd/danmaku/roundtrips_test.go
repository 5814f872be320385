package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/internal/loadtable"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
)

// TestStackRoundTrips is what the whole stack costs Redis per comment: a
// gslb, an ingest and an edge, each its own `danmaku` process as a machine
// of the deployment runs it, on one real Redis; 6,000 users join three
// rooms of a live event through the gslb, then post one comment each, 1,200
// a second in all (5 s). It logs Redis's own counts (INFO stats: socket
// reads, commands) over the comments' window less what the same processes
// cause over an idle window of equal length just before, per 1,000
// comments the ingest admitted — once as is, and once with the gslb's
// syncs counted out exactly (its own round-trip counter in each window):
// they come at a fixed rate whatever the comments, but on a busy machine
// the sync loop falls behind under load, and subtracting the idle rate then
// takes off more than it added. It also logs each role's round trips by
// command, and each node's load reports, read back from the load table's
// change logs. Heavy (a minute, both cores): it runs only with
// DANMAKU_ROUNDTRIPS=1 (make bench-roundtrips, docs/benchmarks.md).
func TestStackRoundTrips(t *testing.T) {
	if os.Getenv("DANMAKU_ROUNDTRIPS") == "" {
		t.Skip("a one-minute measurement; set DANMAKU_ROUNDTRIPS=1 (make bench-roundtrips)")
	}
	const (
		users   = 6000
		rate    = 1200.0
		inFlite = 512 // the ingest answers once its 150 ms window is flushed
	)
	rooms := []string{"rt-1", "rt-2", "rt-3"}
	window := time.Duration(float64(users) / rate * float64(time.Second))

	bin := binary(t)
	redisAddr := testenv.Redis(t)
	probe := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = probe.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ports := freePorts(t, 5)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	const ticketKey = "roundtrips-test-ticket-key-0123456789"
	base := append(os.Environ(),
		"DANMAKU_REDIS="+redisAddr,
		"DANMAKU_GIFT_KEYS=svc-key", "DANMAKU_OPERATOR_KEYS=op-key",
		"DANMAKU_TICKET_KEY="+ticketKey,
	)
	start := func(extraEnv []string, args ...string) {
		startRole(t, ctx, bin, append(append([]string(nil), base...), extraEnv...), args...)
	}
	master := "DANMAKU_MASTER_KEY=" + hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	start([]string{master}, "gslb", "-gslb", addr(0), "-cdn", "http://127.0.0.1:1/cdn/")
	start(nil, "ingest", "-ingest", addr(1), "-audit-dir", t.TempDir(), "-metrics-addr", addr(3))
	start(nil, "edge", "-edge", addr(2), "-metrics-addr", addr(4))
	gslbURL := "http://" + addr(0)
	eventCLI(t, ctx, bin, base, "create", "-gslb", gslbURL, "-f", eventFile(t, "rt", rooms...))

	// Join: a ticket and an entry per user, each in its room.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: inFlite}}
	sess := make([]joined, users)
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		joinErr error
	)
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				s, err := joinRoom(ctx, hc, gslbURL, ticketKey, fmt.Sprintf("rt-user-%d", i), rooms[i%len(rooms)])
				if err != nil {
					errMu.Lock()
					joinErr = err
					errMu.Unlock()
					continue
				}
				sess[i] = s
			}
		})
	}
	for i := range users {
		next <- i
	}
	close(next)
	wg.Wait()
	if joinErr != nil {
		t.Fatal(joinErr)
	}

	// The public roles serve /metrics on their metrics listener only.
	ingestMetrics, edgeMetrics := "http://"+addr(3), "http://"+addr(4)
	roles := []struct{ name, url string }{{"gslb", gslbURL}, {"ingest", ingestMetrics}, {"edge", edgeMetrics}}
	look := func() moment {
		m := moment{redis: redisCounts(t, probe), trips: map[string]map[string]float64{}}
		for _, r := range roles {
			m.trips[r.name] = metricSeries(t, ctx, r.url, "danmaku_redis_round_trips_total")
		}
		m.admitted = sumSeries(metricSeries(t, ctx, ingestMetrics, "danmaku_ingest_accepted_total"), `kind="barrage"`)
		return m
	}

	// Warm-up: one comment per room from users of their own, so that the
	// ingest's scripts are loaded and its rooms' state exists before the
	// windows (a first-ever comment is not what a show pays per comment).
	for i, room := range rooms {
		s, err := joinRoom(ctx, hc, gslbURL, ticketKey, fmt.Sprintf("rt-warm-%d", i), room)
		if err != nil {
			t.Fatal(err)
		}
		if code := postComment(ctx, hc, s, "warm-up"); code != http.StatusOK {
			t.Fatalf("warm-up comment answered %d", code)
		}
	}

	// Idle: every process runs (load reports, syncs, sweeps) and nothing
	// is sent.
	idleFrom := look()
	time.Sleep(window)
	idleTo := look()

	// The comments: the i-th is due at i/rate, whatever the answers.
	jobs := make(chan int, users)
	var (
		ansMu   sync.Mutex
		answers = map[int]int{}
	)
	for range inFlite {
		wg.Go(func() {
			for i := range jobs {
				code := postComment(ctx, hc, sess[i], "往前冲 rt"+strconv.Itoa(i))
				ansMu.Lock()
				answers[code]++
				ansMu.Unlock()
			}
		})
	}
	loadFrom := look()
	begin := time.Now()
	for i := range users {
		if d := time.Until(begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
			time.Sleep(d) // pacing the offer, not waiting for a result
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	loadTo := look()

	idle, load := idleTo.sub(idleFrom), loadTo.sub(loadFrom)
	admitted := load.admitted
	if answers[http.StatusOK] != users {
		t.Errorf("answers by status (0: no answer): %v, want %d × 200", answers, users)
	}
	if admitted == 0 {
		t.Fatal("the ingest admitted nothing")
	}
	// per1000 is what a count grew by over the comments' window beyond
	// what the idle rate explains, per 1,000 comments admitted.
	per1000 := func(f func(moment) float64) float64 {
		return (f(load) - f(idle)/idle.secs*load.secs) / admitted * 1000
	}
	gslbTrips := func(m moment) float64 { return m.roleTrips("gslb") }
	t.Logf("offered %d comments over %d rooms in %.2f s (%.0f/s); admitted %.0f; answers %v", users, len(rooms), load.secs, users/load.secs, admitted, answers)
	t.Logf("Redis side, idle subtracted: %.1f round trips (socket reads) and %.1f commands per 1,000 admitted (idle: %.1f reads/s, %.1f commands/s over %.1f s)",
		per1000(func(m moment) float64 { return m.redis.reads }), per1000(func(m moment) float64 { return m.redis.cmds }), idle.redis.reads/idle.secs, idle.redis.cmds/idle.secs, idle.secs)
	t.Logf("Redis side, the gslb's syncs counted out exactly (%.0f/s idle, %.0f/s under load), the rest idle subtracted: %.1f round trips per 1,000 admitted",
		gslbTrips(idle)/idle.secs, gslbTrips(load)/load.secs, per1000(func(m moment) float64 { return m.redis.reads - gslbTrips(m) }))
	t.Logf("load report transactions (EXEC), idle subtracted: %.1f per 1,000 admitted (load %.1f/s, idle %.1f/s)",
		per1000(func(m moment) float64 { return m.redis.execs }), load.redis.execs/load.secs, idle.redis.execs/idle.secs)
	for _, r := range roles {
		t.Logf("client side, %s: %.1f round trips per 1,000 admitted, idle subtracted; by command, idle/s → load/s: %s",
			r.name, per1000(func(m moment) float64 { return m.roleTrips(r.name) }), rates(idle.trips[r.name], idle.secs, load.trips[r.name], load.secs))
	}
	for _, w := range []struct {
		name     string
		from, to moment
	}{{"idle", idleFrom, idleTo}, {"load", loadFrom, loadTo}} {
		byNode := reportsByNode(t, probe, w.from.redis.at, w.to.redis.at)
		secs := w.to.redis.at.Sub(w.from.redis.at).Seconds()
		for _, id := range slices.Sorted(maps.Keys(byNode)) {
			r := byNode[id]
			t.Logf("%s window: node %s wrote %d load reports (%.1f/s), CPU %.3f..%.3f, conns %d..%d", w.name, id, r.n, float64(r.n)/secs, r.minCPU, r.maxCPU, r.minConn, r.maxConn)
		}
	}
}

// moment is what the measurement reads at one time: Redis's counters, each
// role's client round trips by command, and the comments admitted.
type moment struct {
	redis    counts
	trips    map[string]map[string]float64 // role → series → value
	admitted float64
	secs     float64 // of a difference
}

func (m moment) sub(o moment) moment {
	d := moment{redis: m.redis.sub(o.redis), trips: map[string]map[string]float64{}, admitted: m.admitted - o.admitted, secs: m.redis.at.Sub(o.redis.at).Seconds()}
	for role, series := range m.trips {
		d.trips[role] = map[string]float64{}
		for k, v := range series {
			d.trips[role][k] = v - o.trips[role][k]
		}
	}
	return d
}

func (m moment) roleTrips(role string) float64 {
	var n float64
	for _, v := range m.trips[role] {
		n += v
	}
	return n
}

// rates lists each series' rate over two windows.
func rates(a map[string]float64, aSecs float64, b map[string]float64, bSecs float64) string {
	keys := slices.Sorted(maps.Keys(b))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f → %.1f", k, a[k]/aSecs, b[k]/bSecs))
	}
	return strings.Join(parts, ", ")
}

// startRole starts `danmaku ARGS` with env, stops it (SIGTERM) when the
// test ends, and returns once it says it serves.
func startRole(t *testing.T, ctx context.Context, bin string, env []string, args ...string) *lines {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	l := startLines(t, cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	l.waitFor(t, ctx, "press Ctrl-C to stop")
	return l
}

// joined is a user's way to post: its ingest's barrage URL for its room
// and its token.
type joined struct{ url, authz string }

// postComment posts text as s and answers the status (0: no answer).
func postComment(ctx context.Context, hc *http.Client, s joined, text string) int {
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	req.Header.Set("Authorization", s.authz)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// joinRoom mints user's ticket and fetches its entry for room, retrying
// what a client retries (429, 503) a few times.
func joinRoom(ctx context.Context, hc *http.Client, gslbURL, ticketKey, user, room string) (joined, error) {
	ticket, err := auth.MintTicket([]byte(ticketKey), user, auth.Ticket{Nick: user[len(user)-4:]}, time.Hour)
	if err != nil {
		return joined{}, err
	}
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gslbURL+"/v1/entry?room="+url.QueryEscape(room), nil)
		req.Header.Set("Authorization", "Bearer "+ticket)
		resp, err := hc.Do(req)
		if err != nil {
			return joined{}, err
		}
		var e wire.Entry
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK && err == nil && len(e.Ingest) > 0:
			return joined{url: e.Ingest[0] + "/v1/rooms/" + url.PathEscape(room) + "/barrage", authz: "Bearer " + e.Token}, nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && attempt < 20:
			select {
			case <-ctx.Done():
				return joined{}, ctx.Err()
			case <-time.After(250 * time.Millisecond): // a client's back-off
			}
		default:
			return joined{}, fmt.Errorf("entry for %s: %d (%v)", user, resp.StatusCode, err)
		}
	}
}

// counts are Redis's own counters at a moment.
type counts struct {
	at                 time.Time
	reads, cmds, execs float64
}

// sub is c - o less the probe's own INFO calls in between: each
// redisCounts makes two, and each is one read and one command.
func (c counts) sub(o counts) counts {
	return counts{at: c.at, reads: c.reads - o.reads - 2, cmds: c.cmds - o.cmds - 2, execs: c.execs - o.execs}
}

func redisCounts(t *testing.T, rdb *redis.Client) counts {
	t.Helper()
	ctx := context.Background()
	c := counts{at: time.Now()}
	stats, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	cmdstats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(stats+"\r\n"+cmdstats, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "total_reads_processed":
			c.reads, _ = strconv.ParseFloat(v, 64)
		case "total_commands_processed":
			c.cmds, _ = strconv.ParseFloat(v, 64)
		case "cmdstat_exec":
			for kv := range strings.SplitSeq(v, ",") {
				if n, ok := strings.CutPrefix(kv, "calls="); ok {
					c.execs, _ = strconv.ParseFloat(n, 64)
				}
			}
		}
	}
	return c
}

// nodeReports is what one node wrote to the load table in a window.
type nodeReports struct {
	n                int
	minCPU, maxCPU   float64
	minConn, maxConn int
}

// reportsByNode reads the load reports each node wrote between from and
// to from the load table's change logs (a stream entry's id is Redis's
// time of the write; a record is v1|kind|at|conns|cap|cpu|...).
func reportsByNode(t *testing.T, rdb *redis.Client, from, to time.Time) map[string]nodeReports {
	t.Helper()
	out := map[string]nodeReports{}
	for k := range loadtable.Shards {
		log := "danmaku:{load:" + strconv.Itoa(k) + "}:log"
		entries, err := rdb.XRange(context.Background(), log, strconv.FormatInt(from.UnixMilli(), 10), strconv.FormatInt(to.UnixMilli(), 10)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			for id, v := range e.Values {
				f := strings.Split(fmt.Sprint(v), "|")
				if len(f) < 6 {
					continue // a removal
				}
				cpu, _ := strconv.ParseFloat(f[5], 64)
				conns, _ := strconv.Atoi(f[3])
				r, seen := out[id]
				if !seen {
					r = nodeReports{minCPU: cpu, maxCPU: cpu, minConn: conns, maxConn: conns}
				}
				r.n++
				r.minCPU, r.maxCPU = min(r.minCPU, cpu), max(r.maxCPU, cpu)
				r.minConn, r.maxConn = min(r.minConn, conns), max(r.maxConn, conns)
				out[id] = r
			}
		}
	}
	return out
}

// metricSeries reads one metric family from a role's /metrics: each
// series' value by its labels ("" for none).
func metricSeries(t *testing.T, ctx context.Context, base, name string) map[string]float64 {
	t.Helper()
	out, err := testenv.MetricSeries(ctx, base, name)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sumSeries adds up the series whose labels include label (`k="v"`): a
// counter's children across the labels not asked for (event and room).
func sumSeries(series map[string]float64, label string) float64 {
	var sum float64
	for labels, v := range series {
		if strings.Contains(labels, label) {
			sum += v
		}
	}
	return sum
}
