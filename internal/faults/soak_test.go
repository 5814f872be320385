package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"danmaku/auth"
	"danmaku/internal/testenv"
)

// soakRefresh is how often the soak's senders re-fetch their entries
// (loadgen -refresh-every). At the SDK's 80 % of a 10-minute token they
// would do it once, all together, 8 minutes in: a burst of entries that
// opens a dozen keep-alive connections at each gslb, held until the
// gslb's idle timeout (goroutines 20 → 30 for 90 s, the heap goal +0.3
// MiB), a bounded step in the last fifth of a 10-minute soak that the
// line fitted after the warm-up reads as growth. Every 2 minutes puts
// three to four refreshes inside the fits, so their cost is steady state
// and what a refresh leaked would climb with each of them.
const soakRefresh = 2 * time.Minute

// soakInterval is how often the soak samples every series.
const soakInterval = 10 * time.Second

// soakWarm is the least left out of the fits: joins, first connections
// and caches filling are growth that stops, not a leak.
const soakWarm = time.Minute

// edgeRing is the edge's resume ring of a room (edge.Config.RingSize's
// default): 4,096 pushable messages, which at the soak's gift rate fill
// for minutes, the edges' heap growing with them until it is full.
const edgeRing = 4096

// warmFor is what the soak leaves out of its fits at load l: the first
// minute, or until the edges' rings are full at the gift rate and 30 s
// more, whichever is longer.
func warmFor(l load) time.Duration {
	if l.gifts <= 0 {
		return soakWarm
	}
	return max(soakWarm, time.Duration(edgeRing/l.gifts*float64(time.Second))+30*time.Second).Round(10 * time.Second)
}

// processFamilies are what the soak reads of each role's /metrics (the
// Go and process collectors every role registers) for the table.
var processFamilies = map[string]string{
	"process_resident_memory_bytes": seriesRSS,
	"go_memstats_heap_alloc_bytes":  "heap MiB",
	"go_memstats_next_gc_bytes":     "Go heap goal MiB",
	"go_goroutines":                 "goroutines",
	"process_open_fds":              "open fds",
	"go_threads":                    "OS threads",
}

// diagFamilies are read to explain the table's memory rows (written with
// the samples, DANMAKU_SOAK_SAMPLES): the runtime's memory classes as
// the Go collector exports them from runtime/metrics, and what the
// ingests' token caches hold.
var diagFamilies = map[string]string{
	// The ingests' verified-token cache, which grows with the tokens the
	// senders present until they expire (about 1.6 KiB each).
	"danmaku_ingest_token_cache_tokens": "verified tokens cached",
	"go_memstats_sys_bytes":             "Go runtime sys MiB",
	"go_memstats_heap_released_bytes":   "Go heap released MiB",
	"go_memstats_heap_inuse_bytes":      "Go heap in-use spans MiB",
	"go_memstats_heap_idle_bytes":       "Go heap idle spans MiB",
	"go_memstats_stack_inuse_bytes":     "Go stacks MiB",
}

// The memory rows of a role besides heap and heap goal.
const (
	seriesRSS = "RSS MiB"
	// seriesRetained is the memory the Go runtime holds from the OS: all
	// it has mapped less the heap pages it has returned
	// (go_memstats_sys_bytes − go_memstats_heap_released_bytes:
	// runtime/metrics /memory/classes/total:bytes −
	// /memory/classes/heap/released:bytes).
	seriesRetained = "Go runtime retained MiB (sys − released)"
	// seriesFile is the file-backed part of the resident set (smaps_rollup
	// Rss − Anonymous): the binary's pages, mapped by the kernel as code
	// runs and shared by every role.
	seriesFile = "RSS file-backed MiB"
	// seriesOutside is the anonymous resident memory outside the Go
	// heap's arenas, from /proc/PID/smaps (AnonOutsideGoHeap): libc's
	// malloc and the stacks of the threads it starts, C libraries' mmaps,
	// and the runtime's metadata (a few per cent of the heap). It was
	// smaps_rollup's Anonymous less the runtime's retained memory, which
	// counts pages mapped and never touched: negative, and rising as the
	// runtime touched them, a Go matter read as memory outside Go.
	seriesOutside = "RSS anonymous outside the Go heap MiB"
)

// series is one sampled quantity.
type series struct {
	name   string
	ts, ys []float64
}

// TestSoak is `make soak`: the show's load with no fault for
// DANMAKU_SOAK (a duration, 10m by default in the Makefile), sampling
// every role, Redis and S3 every 10 s, then a slope per series with its
// verdict (Slope.Flat), written into docs/reliability.md with
// DANMAKU_FAULTS_WRITE.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("DANMAKU_SOAK"))
	if os.Getenv("DANMAKU_SOAK") == "" {
		t.Skip("the soak takes 10 minutes or more; set DANMAKU_SOAK=10m (make soak)")
	}
	l := showLoad(t, d)
	l.refresh = soakRefresh
	if err != nil || d < 2*warmFor(l) {
		t.Fatalf("DANMAKU_SOAK=%q: want a duration of at least %v (twice what is left out of the fits at %.0f gifts/s)", os.Getenv("DANMAKU_SOAK"), 2*warmFor(l), l.gifts)
	}
	danmakuBuild.Env = []string{fixedHeapBase} // AnonOutsideGoHeap finds the heap by its address
	s := newStack(t, stackOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	lr := s.startLoad(l)
	start := lr.awaitOffer(t)
	// Every user's entry at every gslb, inside the warm-up: see warmEntries.
	wg.Go(func() {
		if err := s.warmEntries(ctx, l); err != nil {
			t.Errorf("warming the gslbs' last answers: %v", err)
		}
	})
	all := map[string]*series{}
	add := func(name string, at time.Time, v float64) {
		sr := all[name]
		if sr == nil {
			sr = &series{name: name}
			all[name] = sr
		}
		sr.ts = append(sr.ts, at.Sub(start).Minutes())
		sr.ys = append(sr.ys, v)
	}
	var segCounts []int // S3 objects of the room at each sample
	tick := time.NewTicker(soakInterval)
	defer tick.Stop()
	var lerr error
	func() {
		for {
			select {
			case lerr = <-lr.done:
				return
			case now := <-tick.C:
				if now.Sub(start) > d {
					continue // the load's drain: not the load
				}
				s.sample(ctx, now, add)
				if n, err := s.objectCount(ctx); err == nil {
					segCounts = append(segCounts, n)
					add("S3 objects of the room, per minute", now, 0) // placeholder, replaced below
				}
			}
		}
	}()
	if lerr != nil {
		t.Fatalf("loadgen: %v\n%s", lerr, tail(lr.output(), 30))
	}
	rep, err := lr.report()
	if err != nil {
		t.Fatal(err)
	}
	// The gifts and the clients' errors, counted as a fault row counts
	// them: a soak is a row without a fault, and minutes at load must keep
	// every gift exactly once too.
	row := rowOf("soak", rep)
	logNetworkErrors(t, "soak", rep)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Minute)
	row.GiftsInSegments, row.GiftsSegmentDoubled, err = s.segmentGifts(sctx)
	scancel()
	if err != nil {
		t.Errorf("segments: %v", err)
	}
	// Objects written per minute: the difference of the counts a minute
	// apart (six samples).
	if sr := all["S3 objects of the room, per minute"]; sr != nil {
		per := 6
		sr.ys = sr.ys[:0]
		ts := sr.ts
		sr.ts = nil
		for i := per; i < len(segCounts); i++ {
			sr.ts = append(sr.ts, ts[i])
			sr.ys = append(sr.ys, float64(segCounts[i]-segCounts[i-per]))
		}
	}
	// Latency percentiles per minute, from the load's timeline (POST
	// p50/p99 of each second; a minute's is the worst second's).
	perMin := map[int][2]float64{}
	for _, sec := range rep.Timeline {
		m := int(sec.T / 60)
		v := perMin[m]
		v[0], v[1] = max(v[0], sec.PostP50Ms), max(v[1], sec.PostP99Ms)
		perMin[m] = v
	}
	for _, m := range slices.Sorted(mapsKeysInt(perMin)) {
		at := start.Add(time.Duration(m)*time.Minute + 30*time.Second)
		add("comment POST p50 ms (worst second of the minute)", at, perMin[m][0])
		add("comment POST p99 ms (worst second of the minute)", at, perMin[m][1])
	}
	if path := os.Getenv("DANMAKU_SOAK_SAMPLES"); path != "" {
		if err := writeSamples(path, all); err != nil {
			t.Error(err)
		}
	}
	for n := range all {
		if strings.HasPrefix(n, diagPrefix) {
			delete(all, n)
		}
	}
	table := soakTable(all, d, l, rep.Latency.GiftE2E.P99Ms, rep.Latency.BarrageE2E.P99Ms) + soakDelivery(row)
	fmt.Println(table)
	writeTable(t, "soak", table)
	if strings.Contains(table, "**FAIL**") {
		t.Error("a series grows: see the table")
	}
	if !row.Pass() {
		t.Error("gifts lost or doubled during the soak: see the table")
	}
}

// warmEntries fetches an entry for every user of load l (its senders and
// its viewers, as loadgen names them) at every gslb directly, once, inside
// the warm-up the fits leave out. A gslb keeps each user's last answer for
// a token life (gslb's lastEntries) to answer again near a rate limit; the
// balancer sends a user's entry to either gslb, so without this each
// gslb's cache first meets half the users at their first refresh (inside
// the fits: soakRefresh, or 80 % of a token's life), and its heap steps up
// by them (~0.9 KiB a user, about twice that in heap goal) — growth that
// stops at the load's users. Entered everywhere here, every cache holds
// the most this load can put in it before the fits begin: a refresh only
// replaces answers and the rotation only drops them, so a later step is
// something else. What a soak's fixed set of users cannot show — growth
// per distinct user — is the gslb's unit tests' (TestLastEntriesHoldOneTokenLife).
func (s *stack) warmEntries(ctx context.Context, l load) error {
	ids := make([][2]string, 0, l.senders+l.viewers)
	for i := range l.senders {
		ids = append(ids, [2]string{"lg" + strconv.Itoa(i), "u" + strconv.Itoa(i%100_000)})
	}
	for i := range l.viewers {
		ids = append(ids, [2]string{"lgp" + strconv.Itoa(i), "p" + strconv.Itoa(i%10_000)})
	}
	var mu sync.Mutex
	codes := map[string]int{}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, n := range s.order {
		p := s.procs[n]
		if p.role != "gslb" {
			continue
		}
		for _, id := range ids {
			tk, err := auth.MintTicket([]byte(ticketKey), id[0], auth.Ticket{Nick: id[1]}, 2*time.Hour)
			if err != nil {
				return err
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				got := "error"
				for range 3 { // a loaded gslb may answer 503 for a moment
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/v1/entry?room="+room, nil)
					req.Header.Set("Authorization", "Bearer "+tk)
					resp, err := http.DefaultClient.Do(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						got = strconv.Itoa(resp.StatusCode)
						if resp.StatusCode == http.StatusOK {
							break
						}
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Second):
					}
				}
				mu.Lock()
				codes[got]++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if len(codes) != 1 || codes["200"] == 0 {
		return fmt.Errorf("entries answered %v; want every one 200", codes)
	}
	return nil
}

func mapsKeysInt(m map[int][2]float64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sample reads every role's process figures and Redis's memory and keys.
func (s *stack) sample(ctx context.Context, now time.Time, add func(string, time.Time, float64)) {
	for _, n := range s.order {
		p := s.procs[n]
		if p.exited() {
			continue
		}
		got, err := scrape(ctx, "http://"+p.metrics, processFamilies, diagFamilies)
		if err != nil {
			continue
		}
		for prefix, fams := range map[string]map[string]string{"": processFamilies, diagPrefix: diagFamilies} {
			for fam, label := range fams {
				v, ok := got[fam]
				if !ok {
					continue
				}
				if strings.HasSuffix(label, "MiB") {
					v /= 1 << 20
				}
				add(prefix+p.name+" "+label, now, v)
			}
		}
		sys, okS := got["go_memstats_sys_bytes"]
		rel, okR := got["go_memstats_heap_released_bytes"]
		if !okS || !okR {
			continue
		}
		add(p.name+" "+seriesRetained, now, (sys-rel)/(1<<20))
		if rss, anon, err := smapsRollup(p.cmd.Process.Pid); err == nil {
			add(diagPrefix+p.name+" RSS anonymous MiB", now, anon/(1<<20))
			add(p.name+" "+seriesFile, now, (rss-anon)/(1<<20))
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", p.cmd.Process.Pid)); err == nil {
			if out, in, err := AnonOutsideGoHeap(b); err == nil {
				add(p.name+" "+seriesOutside, now, float64(out)/(1<<20))
				add(diagPrefix+p.name+" RSS anonymous in the Go heap's arenas MiB", now, float64(in)/(1<<20))
			} else {
				s.t.Errorf("%s: %v", p.name, err)
			}
		}
	}
	if info, err := s.rdb.Info(ctx, "memory").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					add(redisMemory, now, f/(1<<20))
				}
			}
		}
	}
	// Some keys live for a fixed time by design and grow until then: gift
	// orders (three keys each, 24 h of idempotency) and the ingests' batch
	// records (10 min). The rest must be flat.
	counts := map[string]int{}
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return
		}
		for _, k := range keys {
			c := keyClass(k)
			counts[c]++
			if c == keysRest {
				counts[diagPrefix+"Redis key "+keyShape(k)]++
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	for c, n := range counts {
		add(c, now, float64(n))
	}
}

// The Redis key series: the two that grow until their keys' TTL, and
// the rest.
const (
	keysOrders  = "Redis keys, gift orders (24 h idempotency TTL)"
	keysBatches = "Redis keys, ingest batch records (10 min TTL)"
	keysRest    = "Redis keys, the rest (least of each minute)"
)

// keyClass is the series a Redis key counts in.
func keyClass(k string) string {
	switch {
	case strings.Contains(k, ":order:") || strings.Contains(k, ":orderterms:") || strings.HasPrefix(k, "danmaku:{order:"):
		return keysOrders
	case strings.Contains(k, ":batch:"):
		return keysBatches
	default:
		return keysRest
	}
}

// keyShape is a key with its variable parts (ids, hashes, numbers) cut:
// what a diagnostic series of the rest is counted by.
func keyShape(k string) string {
	parts := strings.Split(k, ":")
	if len(parts) > 3 {
		parts = parts[:3]
	}
	return strings.Join(parts, ":")
}

// diagPrefix marks a series sampled to explain another: written with the
// samples (DANMAKU_SOAK_SAMPLES), not a row of the table.
const diagPrefix = "diag: "

const redisMemory = "Redis used_memory MiB"

// objectCount counts the room's objects in S3.
func (s *stack) objectCount(ctx context.Context) (int, error) {
	c := s.s3.Client()
	n := 0
	var token *string
	for {
		page, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.s3.Bucket), Prefix: aws.String(s3Prefix), ContinuationToken: token})
		if err != nil {
			return 0, err
		}
		n += len(page.Contents)
		if !aws.ToBool(page.IsTruncated) {
			return n, nil
		}
		token = page.NextContinuationToken
	}
}

// soakDelivery is the line under the soak's table: the gifts kept exactly
// once (Row.Pass, judged), the comments, and what the clients were answered
// other than success over the whole run, the joins included (shown, not
// judged: a run without a fault should have none, and any it has is for
// the text to explain).
func soakDelivery(r Row) string {
	verdict := "every gift kept exactly once"
	if !r.Pass() {
		verdict = "**FAIL**: gifts lost or doubled"
	}
	return fmt.Sprintf("\nGifts accepted / in segments / decoded by every viewer: %d / %d / %d; (viewer, gift) pairs lost %d, doubled %d, ids in two segments %d: %s. Viewers joined %d/%d. Comments answered ok / admitted / shown: %d / %d / %d. Client-visible errors over the run: %s.\n",
		r.GiftsAccepted, r.GiftsInSegments, r.GiftsToAll, r.Lost, r.Doubled, r.GiftsSegmentDoubled, verdict,
		r.Viewers, r.ViewersAsked, r.BarrageOK, r.BarrageAdmitted, r.BarrageShown, FormatCounts(r.Errors))
}

// soakTable renders the fits, warm-up left out.
func soakTable(all map[string]*series, d time.Duration, l load, giftP99, barrageP99 float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Load: %d viewers polling the CDN and holding the edge, %d senders at the SDK's send throttle, %.0f gifts/s, for %v; sampled every %v, the first %v left out of the fits. End-to-end p99 over the run: gifts %.0f ms, comments %.0f ms. One run, %s.\n\n",
		l.viewers, l.senders, l.gifts, d, soakInterval, warmFor(l), giftP99, barrageP99, time.Now().UTC().Format("2006-01-02"))
	b.WriteString("| series | first | last | slope per minute | ± 2 s.e. | verdict |\n|---|---|---|---|---|---|\n")
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	fits := map[string]Slope{}
	warmed, whole := map[string][]float64{}, map[string][]float64{}
	for _, n := range names {
		sr := all[n]
		// The least of each window is taken over the whole run, so that
		// every fitted sample has a whole window behind it: a leak comes
		// out late by the window, its slope the same.
		src := sr.ys
		switch {
		case n == keysRest:
			src = leastOver(src, time.Minute)
		case isCount(n):
			src = leastOver(src, countWindow)
		}
		var ts, ys []float64
		for i := range sr.ts {
			if sr.ts[i] >= warmFor(l).Minutes() {
				ts, ys = append(ts, sr.ts[i]), append(ys, src[i])
			}
		}
		fits[n], warmed[n], whole[n] = Fit(ts, ys), ys, sr.ys
	}
	bounded := fits[keysOrders].PerMin + fits[keysBatches].PerMin
	restFlat, _ := judge(keysRest, fits, warmed, whole)
	for _, n := range names {
		f, ys := fits[n], warmed[n]
		ok, why := judge(n, fits, warmed, whole)
		if !ok && n == redisMemory && restFlat && bounded > 0 {
			// Redis grows by what it holds; with every other key flat,
			// that is the keys that live out their TTL: say what one costs.
			ok, why = true, fmt.Sprintf("grows with the TTL-bounded keys alone (the rest are flat): %.0f bytes a key, until their TTL", f.PerMin*(1<<20)/bounded)
		}
		if isCount(n) && n != keysRest {
			why += fmt.Sprintf(" (fitted on the least of each %v)", shortMinutes(countWindow))
		}
		verdict := "pass: " + why
		switch {
		case notJudged(n) != "":
			verdict = "shown, not judged: " + notJudged(n)
		case !ok && (n == keysOrders || n == keysBatches):
			verdict = fmt.Sprintf("grows by design, %.0f keys a minute, until the keys' TTL: not judged", f.PerMin)
		case !ok:
			verdict = "**FAIL**: " + why
		}
		first, last := 0.0, 0.0
		if len(ys) > 0 {
			first, last = ys[0], ys[len(ys)-1]
		}
		fmt.Fprintf(&b, "| %s | %.4g | %.4g | %+.3g | %.3g | %s |\n", n, first, last, f.PerMin, 2*f.StdErr, verdict)
	}
	return b.String()
}

// scrape reads base's /metrics once and returns the unlabelled samples of
// the families asked for.
func scrape(ctx context.Context, base string, families ...map[string]string) (map[string]float64, error) {
	got, err := testenv.Scrape(ctx, base, func(f string) bool {
		for _, fams := range families {
			if _, ok := fams[f]; ok {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for k, v := range got {
		if k.Labels == "" {
			out[k.Family] = v
		}
	}
	return out, nil
}

// smapsRollup reads a process's resident set and the anonymous part of it
// (bytes) from /proc/PID/smaps_rollup: the rest is file-backed, the
// binary's pages mapped in as code runs.
func smapsRollup(pid int) (rss, anon float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	var okR, okA bool
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			rss, okR = kb*1024, true
		case "Anonymous:":
			anon, okA = kb*1024, true
		}
	}
	if !okR || !okA {
		return 0, 0, fmt.Errorf("/proc/%d/smaps_rollup: no Rss or Anonymous line", pid)
	}
	return rss, anon, nil
}

// writeSamples writes every series' samples as CSV (series, minute,
// value): DANMAKU_SOAK_SAMPLES names the file.
func writeSamples(path string, all map[string]*series) error {
	var b strings.Builder
	b.WriteString("series,minute,value\n")
	for _, n := range slices.Sorted(maps.Keys(all)) {
		sr := all[n]
		for i := range sr.ts {
			fmt.Fprintf(&b, "%q,%.3f,%g\n", n, sr.ts[i], sr.ys[i])
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// judge is a series' verdict (docs/reliability.md, "Soak", says each
// rule's reason). Every series is held to Slope.Flat; a count (goroutines,
// descriptors, the Redis keys without a long TTL) passes too when the last
// third of its fitted samples makes no new high over the run before it,
// the joins included (NoNewHigh): what the load holds open stays under
// the joins' peak, where a leak keeps climbing. The memory outside the Go
// runtime is weighed against the process's resident set, which it adds to.
func judge(n string, fits map[string]Slope, warmed, whole map[string][]float64) (bool, string) {
	f := fits[n]
	if role, ok := strings.CutSuffix(n, " "+seriesOutside); ok {
		return f.FlatOf(fits[role+" "+seriesRSS].Mean)
	}
	ok, why := f.Flat()
	if !ok && isCount(n) && NoNewHigh(whole[n], len(warmed[n])) {
		return true, fmt.Sprintf("bounded by the load: the last third under the run's high of %.0f (the joins')", slices.Max(whole[n]))
	}
	return ok, why
}

// isCount reports whether series n counts things (judged with NoNewHigh
// too).
func isCount(n string) bool {
	for _, suf := range []string{" goroutines", " open fds"} {
		if strings.HasSuffix(n, suf) {
			return true
		}
	}
	return n == keysRest
}

// notJudged says why series n is shown without a verdict, or "".
func notJudged(n string) string {
	switch {
	case strings.HasSuffix(n, " "+seriesRSS):
		return "file-backed pages + the Go heap's resident pages + the anonymous memory outside the Go heap (row below)"
	case strings.HasSuffix(n, " "+seriesRetained):
		return "fills toward the scavenger's target (110 % of the heap goal, plus stacks and metadata) after a start; judged through the heap goal"
	case strings.HasSuffix(n, " OS threads"):
		return "a high-water mark: the runtime keeps every thread it starts (one per goroutine in a system call or cgo at once), so a burst adds one for good; a stuck call shows in goroutines"
	case strings.HasSuffix(n, " "+seriesFile):
		return "the binary's pages, the kernel's to map in and drop"
	}
	return ""
}

// countWindow is the window a count (goroutines, open descriptors) is
// fitted on the least of: longer than the 90 s a keep-alive connection may
// sit idle before its server closes it (httpx's IdleTimeout), the longest
// a connection the load opened and let go stays counted. A goroutine or a
// descriptor that leaks stays, and raises every sample from its first;
// requests in flight and connections that close by design raise none.
const countWindow = 2 * time.Minute

// leastOver replaces each sample by the least of it and those before it
// within window (at soakInterval): a key or a goroutine that stays raises
// every sample from its first, one living less than window (the entry
// rate-limit windows of the viewers refreshing their tokens, a request in
// flight) none.
func leastOver(ys []float64, window time.Duration) []float64 {
	per := int(window / soakInterval)
	out := make([]float64, len(ys))
	for i := range ys {
		out[i] = slices.Min(ys[max(0, i-per+1) : i+1])
	}
	return out
}

// shortMinutes is d as "2 minutes".
func shortMinutes(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	return fmt.Sprintf("%.0f minutes", d.Minutes())
}

// TestOutsideGoHeap checks the soak's "anonymous RSS outside the Go heap"
// on a process that grows on purpose (testdata/memhog): 32 MiB malloc'd
// and written in C must show there, and 32 MiB of Go heap must not (past
// the runtime's metadata, a few per cent of it). Needs cgo and a C
// compiler (`make deps`); skipped without, unless servers are required.
func TestOutsideGoHeap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/PID/smaps")
	}
	bin := filepath.Join(t.TempDir(), "memhog")
	build := exec.Command("go", "build", "-o", bin, "./testdata/memhog")
	build.Env = append(os.Environ(), "CGO_ENABLED=1", fixedHeapBase)
	if out, err := build.CombinedOutput(); err != nil {
		if testenv.RequireServers() {
			t.Fatalf("building the cgo helper: %v\n%s", err, out)
		}
		t.Skipf("building the cgo helper (a C compiler: make deps): %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	rd := bufio.NewScanner(outp)
	ack := func() {
		t.Helper()
		if !rd.Scan() || rd.Text() != "ok" {
			t.Fatalf("memhog: %q, %v", rd.Text(), rd.Err())
		}
	}
	measure := func() (outside, arenas float64) {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		o, a, err := AnonOutsideGoHeap(b)
		if err != nil {
			t.Fatal(err)
		}
		return float64(o) / (1 << 20), float64(a) / (1 << 20)
	}
	grow := func(what string) {
		t.Helper()
		for range 4 { // 4 × 8 MiB
			if _, err := fmt.Fprintln(in, what); err != nil {
				t.Fatal(err)
			}
			ack()
		}
	}
	ack()
	o0, a0 := measure()
	grow("c")
	o1, a1 := measure()
	grow("go")
	o2, a2 := measure()
	t.Logf("MiB outside the Go heap / in its arenas: start %.1f / %.1f, +32 MiB in C %.1f / %.1f, +32 MiB in Go %.1f / %.1f", o0, a0, o1, a1, o2, a2)
	if d := o1 - o0; d < 30 {
		t.Errorf("32 MiB malloc'd in C raised the memory outside the Go heap by %.1f MiB; want ≥ 30", d)
	}
	if d := a1 - a0; d > 2 {
		t.Errorf("32 MiB malloc'd in C raised the Go heap's arenas by %.1f MiB; want ≤ 2", d)
	}
	if d := a2 - a1; d < 30 {
		t.Errorf("32 MiB of Go heap raised its arenas by %.1f MiB; want ≥ 30", d)
	}
	if d := o2 - o1; d > 3 {
		t.Errorf("32 MiB of Go heap raised the memory outside it by %.1f MiB; want ≤ 3 (the runtime's metadata)", d)
	}
}

// fixedHeapBase is the build environment of the soak's binaries: Go 1.26
// places the heap at a random address (the randomizedheapbase64
// experiment, on by default); with it off the heap's arenas start at the
// runtime's first hint, where AnonOutsideGoHeap looks for them. It moves
// the heap, nothing else. Only the soak builds so (the first build
// compiles every dependency once more, into the build cache): the fault
// table and its quick variant keep the default.
const fixedHeapBase = "GOEXPERIMENT=norandomizedheapbase64"

// TestAnonOutsideGoHeapParse: the arenas' anonymous pages are counted in,
// every other mapping's out, file-backed or not; no arena is an error.
func TestAnonOutsideGoHeapParse(t *testing.T) {
	lo, _, ok := goArenaRange()
	if !ok {
		t.Skip("no known heap address on " + runtime.GOARCH)
	}
	m := func(start, end uint64, name string, anonKB int) string {
		return fmt.Sprintf("%x-%x rw-p 00000000 00:00 0 %s\nSize: %d kB\nRss: %d kB\nAnonymous: %d kB\nVmFlags: rd wr mr mw me ac\n",
			start, end, name, (end-start)>>10, anonKB, anonKB)
	}
	smaps := m(0x400000, 0x58a000, "/usr/bin/danmaku", 0) +
		m(0x58a000, 0x5c0000, "", 40) +
		m(0x854a000, 0x856b000, "[heap]", 100) +
		m(lo, lo+4<<20, "", 3000) +
		m(lo+4<<20, lo+64<<20, "", 0) +
		m(0x7fd178000000, 0x7fd178021000, "", 132) +
		m(0x7ffc00000000, 0x7ffc00021000, "[stack]", 20)
	out, in, err := AnonOutsideGoHeap([]byte(smaps))
	if err != nil {
		t.Fatal(err)
	}
	if out != (40+100+132+20)<<10 || in != 3000<<10 {
		t.Errorf("outside %d, in the arenas %d; want %d, %d", out, in, (40+100+132+20)<<10, 3000<<10)
	}
	noArena := m(0x854a000, 0x856b000, "[heap]", 100) + m(0x1acdc1800000, 0x1acdc1c00000, "", 3000)
	if _, _, err := AnonOutsideGoHeap([]byte(noArena)); err == nil {
		t.Error("a randomized heap base (no mapping in the arena range) was measured; want an error")
	}
}

// TestLeastOver: a transient (a request in flight, a connection closed
// within the window) leaves the floor alone; a leak raises it from its
// first sample on.
func TestLeastOver(t *testing.T) {
	transient := []float64{20, 20, 30, 30, 30, 30, 30, 30, 30, 20, 20, 20, 21, 20}
	if got := leastOver(transient, 2*time.Minute); slices.Max(got) != 20 {
		t.Errorf("a 70 s step of 10 raised the least of each 2 minutes: %v", got)
	}
	var leak []float64
	for i := range 30 {
		leak = append(leak, float64(20+i))
	}
	got := leastOver(leak, 2*time.Minute)
	per := int(2 * time.Minute / soakInterval)
	if !slices.Equal(got[per-1:], leak[:len(leak)-per+1]) {
		t.Errorf("a leak of one a sample: %v, want it %d samples late, its slope the same", got, per-1)
	}
	if got := leastOver([]float64{5, 3, 4}, time.Minute); !slices.Equal(got, []float64{5, 3, 3}) {
		t.Errorf("least of each minute: %v", got)
	}
}
