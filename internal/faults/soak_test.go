package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"danmaku/internal/testenv"
)

// soakInterval is how often the soak samples every series.
const soakInterval = 10 * time.Second

// soakWarm is left out of the fits: joins, first connections and caches
// filling are growth that stops, not a leak.
const soakWarm = time.Minute

// processFamilies are what the soak reads of each role's /metrics (the
// Go and process collectors every role registers).
var processFamilies = map[string]string{
	"process_resident_memory_bytes": "RSS MiB",
	"go_memstats_heap_alloc_bytes":  "heap MiB",
	"go_goroutines":                 "goroutines",
	"process_open_fds":              "open fds",
}

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
	if err != nil || d < 2*soakWarm {
		t.Fatalf("DANMAKU_SOAK=%q: want a duration of at least %v", os.Getenv("DANMAKU_SOAK"), 2*soakWarm)
	}
	s := newStack(t, stackOpts{})
	l := showLoad(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	lr := s.startLoad(l)
	start := lr.awaitOffer(t)
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
	table := soakTable(all, d, l, rep.Latency.GiftE2E.P99Ms, rep.Latency.BarrageE2E.P99Ms)
	fmt.Println(table)
	writeTable(t, "soak", table)
	if strings.Contains(table, "**FAIL**") {
		t.Error("a series grows: see the table")
	}
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
		for fam, label := range processFamilies {
			got, err := testenv.MetricSeries(ctx, "http://"+p.metrics, fam)
			v, ok := got[""]
			if err != nil || !ok {
				continue
			}
			if strings.HasSuffix(label, "MiB") {
				v /= 1 << 20
			}
			add(p.name+" "+label, now, v)
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
			counts[keyClass(k)]++
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	for _, c := range []string{keysOrders, keysBatches, keysRest} {
		add(c, now, float64(counts[c]))
	}
}

// The Redis key series: the two that grow until their keys' TTL, and
// the rest.
const (
	keysOrders  = "Redis keys, gift orders (24 h idempotency TTL)"
	keysBatches = "Redis keys, ingest batch records (10 min TTL)"
	keysRest    = "Redis keys, the rest"
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

// soakTable renders the fits, warm-up left out.
func soakTable(all map[string]*series, d time.Duration, l load, giftP99, barrageP99 float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Load: %d viewers polling the CDN and holding the edge, %d senders at the SDK's send throttle, %.0f gifts/s, for %v; sampled every %v, the first %v left out of the fits. End-to-end p99 over the run: gifts %.0f ms, comments %.0f ms. One run, %s.\n\n",
		l.viewers, l.senders, l.gifts, d, soakInterval, soakWarm, giftP99, barrageP99, time.Now().UTC().Format("2006-01-02"))
	b.WriteString("| series | first | last | slope per minute | ± 2 s.e. | verdict |\n|---|---|---|---|---|---|\n")
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	fits := map[string]Slope{}
	warmed := map[string][]float64{}
	for _, n := range names {
		sr := all[n]
		var ts, ys []float64
		for i := range sr.ts {
			if sr.ts[i] >= soakWarm.Minutes() {
				ts, ys = append(ts, sr.ts[i]), append(ys, sr.ys[i])
			}
		}
		fits[n], warmed[n] = Fit(ts, ys), ys
	}
	bounded := fits[keysOrders].PerMin + fits[keysBatches].PerMin
	restFlat, _ := fits[keysRest].Flat()
	for _, n := range names {
		f, ys := fits[n], warmed[n]
		ok, why := f.Flat()
		if !ok && n == redisMemory && restFlat && bounded > 0 {
			// Redis grows by what it holds; with every other key flat,
			// that is the keys that live out their TTL: say what one costs.
			ok, why = true, fmt.Sprintf("grows with the TTL-bounded keys alone (the rest are flat): %.0f bytes a key, until their TTL", f.PerMin*(1<<20)/bounded)
		}
		verdict := "pass: " + why
		switch {
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
