package loadgen

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"danmaku/internal/event"
	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

// TestLoadgenAgainstStack runs the generator for two seconds against the
// whole pipeline in this process, at a rate under every limit (the user
// and room buckets, the slicer's budget), so that every count must add up:
// every comment due is sent or accounted for, every one sent has exactly
// one answer counted by reason, every answered comment is stored and
// decoded by every poller, every gift order is accepted exactly once.
func TestLoadgenAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline for several seconds")
	}
	st := stacktest.Start(t, stack.Config{Events: []event.Event{stacktest.LiveEvent("lg", "lg-room")}})
	g, err := New(Config{
		GSLB: st.URLs[stack.RoleGSLB], Room: "lg-room",
		Users: 30, Rate: 8, Duration: 2 * time.Second, GiftRate: 3, Pollers: 2,
		Concurrency: 8, GiftConcurrency: 2, EntryConcurrency: 8,
		// Long enough for a loaded -race run; the drain ends as soon as
		// everything has been decoded.
		Drain: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + text.String())

	if rep.Users.Joined != 30 || rep.Users.EntryErrors != nil {
		t.Errorf("users: %+v", rep.Users)
	}
	b := rep.Barrage
	if b.Due != b.HeldBack+b.NotOffered+b.NoEntry+b.Attempted {
		t.Errorf("barrage: due %d ≠ held %d + not offered %d + no entry %d + attempted %d", b.Due, b.HeldBack, b.NotOffered, b.NoEntry, b.Attempted)
	}
	var answers int64
	for _, n := range b.Errors {
		answers += n
	}
	if b.Attempted != b.OK+answers {
		t.Errorf("barrage: attempted %d ≠ ok %d + errors by reason %d (%v)", b.Attempted, b.OK, answers, b.Errors)
	}
	if b.OK == 0 || b.Attempted != b.OK || len(b.Errors) != 0 {
		t.Errorf("barrage: every comment sent must be answered ok: %+v", b)
	}
	if rep.Latency.BarragePost.Count != b.Attempted {
		t.Errorf("barrage POST latencies %d for %d attempted", rep.Latency.BarragePost.Count, b.Attempted)
	}

	d := rep.Delivery
	if d.Joined != 2 {
		t.Fatalf("pollers joined %d of 2: %+v", d.Joined, d.JoinErrors)
	}
	if d.CommentsAccepted != b.OK || d.CommentsShownByAll != b.OK || d.CommentDecodes != 2*b.OK || d.DecodedUnanswered != 0 {
		t.Errorf("end-to-end: %d answered ok, delivery %+v", b.OK, d)
	}
	if rep.Latency.BarrageE2E.Count != d.CommentDecodes {
		t.Errorf("end-to-end latencies %d for %d decodes", rep.Latency.BarrageE2E.Count, d.CommentDecodes)
	}
	if d.SegmentsFetched == 0 || d.Duplicates != 0 || d.DroppedBarrage != 0 {
		t.Errorf("poller stats: %+v", d)
	}

	gr := rep.Gifts
	var tries int64
	for _, n := range gr.Answers {
		tries += n
	}
	if tries != gr.Attempts {
		t.Errorf("gifts: %d tries, %d answers by reason (%v)", gr.Attempts, tries, gr.Answers)
	}
	if gr.Orders == 0 || gr.Failed != 0 || gr.DuplicateFirst != 0 || gr.Accepted+gr.DuplicateAfterRetry != gr.Orders {
		t.Errorf("gifts: %+v", gr)
	}
	if d.GiftsAccepted != gr.Orders || d.GiftsShownByAll != gr.Orders {
		t.Errorf("gifts delivered: %d orders, delivery %+v", gr.Orders, d)
	}

	dr := rep.Drops
	if len(dr.ScrapeErrors) != 0 || len(dr.Endpoints) != 1 {
		t.Fatalf("metrics: %+v", dr)
	}
	// The generator is the stack's only client: the nodes' counters are
	// its traffic exactly.
	if dr.Accepted["barrage"] != b.OK || dr.SilentDrops != 0 || dr.BarrageUnaccounted != 0 || len(dr.Rejected) != 0 {
		t.Errorf("drops: %d answered ok, %+v", b.OK, dr)
	}
	if dr.Accepted["gift"] != gr.Accepted {
		t.Errorf("gifts stored %d, accepted %d: not exactly once", dr.Accepted["gift"], gr.Accepted)
	}
	if dr.SlicerShown["barrage"] < b.OK {
		t.Errorf("slicer showed %d barrage, %d sent: %+v", dr.SlicerShown["barrage"], b.OK, dr)
	}

	if len(rep.Timeline) == 0 {
		t.Error("no timeline")
	}
	var sumAttempted int64
	for _, s := range rep.Timeline {
		sumAttempted += s.Attempted
	}
	if sumAttempted != b.Attempted {
		t.Errorf("timeline attempted %d, total %d", sumAttempted, b.Attempted)
	}
	// The JSON report reads back, and a run merged alone is itself.
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	m, err := Merge([]*Report{&back})
	if err != nil {
		t.Fatal(err)
	}
	if m.Barrage.Attempted != b.Attempted || m.Latency != rep.Latency || m.Drops.BarrageUnaccounted != 0 {
		t.Errorf("merged alone: %+v %+v, want %+v", m.Barrage, m.Latency, rep.Latency)
	}
}

// TestLoadgenGiftsOnly: a gift flood needs one entry (to find the ingests),
// not one per user, and every order is stored exactly once. The stack
// serves /metrics on a listener of its own, as outside dev, which the
// generator reads the counters from (IngestMetrics).
func TestLoadgenGiftsOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	st := stacktest.Start(t, stack.Config{Events: []event.Event{stacktest.LiveEvent("lg", "lg-room")}, MetricsAddr: "127.0.0.1:0"})
	g, err := New(Config{GSLB: st.URLs[stack.RoleGSLB], Room: "lg-room", Users: 500, Rate: -1, GiftRate: 40,
		Duration: time.Second, Pollers: -1, GiftConcurrency: 4, IngestMetrics: []string{st.URLs[stack.MetricsListener] + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gr := rep.Gifts
	var answers int64
	for _, n := range gr.Answers {
		answers += n
	}
	if rep.Users.Users != 500 || rep.Users.Joined != 1 || rep.Barrage.Due != 0 {
		t.Errorf("users %+v barrage %+v", rep.Users, rep.Barrage)
	}
	if gr.Orders == 0 || gr.Orders != gr.Accepted || answers != gr.Attempts || rep.Drops.Accepted["gift"] != gr.Accepted {
		t.Errorf("gifts %+v, stored %d", gr, rep.Drops.Accepted["gift"])
	}
	if dr := rep.Drops; len(dr.ScrapeErrors) != 0 || len(dr.Endpoints) != 1 || dr.Endpoints[0] != st.URLs[stack.MetricsListener] {
		t.Errorf("counters read from %v (errors %v), want the metrics listener %s", dr.Endpoints, dr.ScrapeErrors, st.URLs[stack.MetricsListener])
	}
	if rep.Latency.GiftPost.Count != gr.Orders {
		t.Errorf("%d gift latencies for %d orders", rep.Latency.GiftPost.Count, gr.Orders)
	}
}

// TestLoadgenRefusedTicket: a ticket the gslb does not accept fails the
// run at the first user, saying which key to set.
func TestLoadgenRefusedTicket(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	st := stacktest.Start(t, stack.Config{Events: []event.Event{stacktest.LiveEvent("lg", "lg-room")}})
	g, err := New(Config{GSLB: st.URLs[stack.RoleGSLB], Room: "lg-room", Users: 5, Pollers: -1, TicketKey: []byte("not-the-key-of-this-gslb-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "bad_ticket") || !strings.Contains(err.Error(), "DANMAKU_TICKET_KEY") {
		t.Fatalf("Run: %v", err)
	}
	g, err = New(Config{GSLB: st.URLs[stack.RoleGSLB], Room: "no-such-room", Users: 5, Pollers: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = g.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no_such_room") {
		t.Fatalf("Run: %v", err)
	}
}

func TestLoadgenConfigDefaults(t *testing.T) {
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := g.Config()
	if c.GSLB != "http://"+stack.DefaultGSLBAddr || c.Room != "demo" || c.Users != 10_000 || c.Shards != 1 ||
		c.Rate != 1000 || c.Pattern != PatternSteady || c.Duration != time.Minute || c.GiftRate != 10 || c.Pollers != 100 ||
		c.SendInterval != 1200*time.Millisecond || c.GiftKey != stack.DevServiceKey || c.RunID == "" || c.Concurrency != 256 {
		t.Fatalf("defaults: %+v", c)
	}
	// In-flight bound follows the peak rate, within bounds.
	for _, tc := range []struct {
		cfg  Config
		want int
	}{
		{Config{Rate: 8000}, 2000}, {Config{Pattern: PatternPulse, PulsePeak: 38_000}, 8192},
		{Config{Pattern: PatternPulse, PulsePeak: 20_000, Shards: 4}, 1250}, {Config{Rate: 10}, 256}, {Config{Concurrency: 3}, 3},
	} {
		g, err := New(tc.cfg)
		if err != nil || g.cfg.Concurrency != tc.want {
			t.Errorf("New(%+v): concurrency %d, %v; want %d", tc.cfg, g.cfg.Concurrency, err, tc.want)
		}
	}
	// Negative turns a part off.
	g, err = New(Config{Rate: -1, GiftRate: -1, Pollers: -1})
	if err != nil {
		t.Fatal(err)
	}
	if g.sched.base != 0 || g.gifts.base != 0 || g.cfg.share(g.cfg.Pollers) != 0 {
		t.Fatalf("off: %+v %+v", g.sched, g.gifts)
	}
	for _, bad := range []Config{
		{Shard: 2, Shards: 2}, {Pattern: "burst"}, {Duration: -time.Second}, {GSLB: "ftp://x"},
		{RunID: "a b"}, {Users: 1, Shards: 2}, {DevTickets: true, TicketKey: []byte("k")},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

func TestLoadgenShares(t *testing.T) {
	for _, n := range []int{1, 7, 100, 10_001} {
		total := 0
		for i := range 3 {
			c := Config{Shard: i, Shards: 3}
			total += c.share(n)
		}
		if total != n {
			t.Errorf("shares of %d add up to %d", n, total)
		}
	}
}

func TestLoadgenParseRate(t *testing.T) {
	for in, want := range map[string]float64{
		"1000": 1000, "1000/s": 1000, "2.5k/s": 2500, "38k": 38000, "600/m": 10, "36/h": 0.01, "0": 0, " 10 / s ": 10,
	} {
		got, err := ParseRate(in)
		if err != nil || math.Abs(got-want) > 1e-9 {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-5", "10/d", "1/s/s", "NaN"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
	for _, r := range []float64{1000, 0.5, 38000} {
		if got, err := ParseRate(FormatRate(r)); err != nil || math.Abs(got-r) > 1e-6 {
			t.Errorf("FormatRate(%v) = %q reads back %v, %v", r, FormatRate(r), got, err)
		}
	}
}

// TestLoadgenSchedule: cumulative is the integral of rate, so the pacer
// issues exactly what the pattern describes.
func TestLoadgenSchedule(t *testing.T) {
	for _, s := range []schedule{
		{base: 1000},
		{pulse: true, base: 100, peak: 38000, ramp: 10 * time.Second, hold: 5 * time.Second},
		{pulse: true, peak: 5000, ramp: 2 * time.Second, hold: -1},
	} {
		const step = time.Millisecond
		var integral float64
		for at := time.Duration(0); at < 30*time.Second; at += step {
			integral += s.rate(at+step/2) * step.Seconds()
			if want := s.cumulative(at + step); math.Abs(integral-want) > 1+1e-6*want {
				t.Fatalf("%v: at %v integral %.1f, cumulative %.1f", s, at+step, integral, want)
			}
		}
	}
	p := schedule{pulse: true, base: 100, peak: 38000, ramp: 10 * time.Second, hold: 5 * time.Second}
	if p.rate(0) != 0 || p.rate(5*time.Second) != 19000 || p.rate(12*time.Second) != 38000 || p.rate(20*time.Second) != 100 {
		t.Fatalf("pulse rates: %v %v %v %v", p.rate(0), p.rate(5*time.Second), p.rate(12*time.Second), p.rate(20*time.Second))
	}
}

func TestLoadgenParseMetrics(t *testing.T) {
	const text = `# HELP danmaku_ingest_rejected_total Uploads not stored.
# TYPE danmaku_ingest_rejected_total counter
danmaku_ingest_rejected_total{layer="gateway",reason="room_bucket"} 1234
danmaku_ingest_rejected_total{reason="user_bucket",layer="gateway"} 5
danmaku_ingest_rejected_total{layer="input",reason="odd \"one\", \\ really"} 2 1700000000000
danmaku_ingest_accepted_total{kind="barrage"} 9.9e+06
danmaku_gslb_entries_total{result="ok"} 7
danmaku_slicer_segments_total{outcome="written"} 60
go_goroutines 12
`
	got := map[series]float64{}
	if err := parseMetrics(strings.NewReader(text), ingestFamilies, got); err != nil {
		t.Fatal(err)
	}
	want := map[series]float64{
		{famRejected, `layer="gateway",reason="room_bucket"`}:          1234,
		{famRejected, `layer="gateway",reason="user_bucket"`}:          5,
		{famRejected, `layer="input",reason="odd \"one\", \\ really"`}: 2,
		{famAccepted, `kind="barrage"`}:                                9.9e6,
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if r := (series{famRejected, `layer="input",reason="odd \"one\", \\ really"`}).label("reason"); r != `odd "one", \ really` {
		t.Errorf("label: %q", r)
	}
	before := sample{values: map[series]float64{{famAccepted, `kind="barrage"`}: 100, {famAccepted, `kind="gift"`}: 50}}
	after := sample{values: map[series]float64{{famAccepted, `kind="barrage"`}: 150, {famAccepted, `kind="gift"`}: 20}}
	d, reset := delta(before, after)
	if !reset || d[series{famAccepted, `kind="barrage"`}] != 50 || d[series{famAccepted, `kind="gift"`}] != 20 {
		t.Errorf("delta %v reset %v", d, reset)
	}
	if err := parseMetrics(strings.NewReader(`danmaku_ingest_accepted_total{kind="barrage} 1`+"\n"), ingestFamilies, got); err == nil {
		t.Error("unterminated label accepted")
	}
}

// TestLoadgenOwnComments: the body the generator posts carries a tag that
// survives JSON and names the comment; other texts are not its own.
func TestLoadgenOwnComments(t *testing.T) {
	g, err := New(Config{RunID: "abc12"})
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{0, 1, 35, 36, 123_456_789} {
		var b struct{ Text string }
		if err := json.Unmarshal(g.body(seq), &b); err != nil {
			t.Fatalf("body %s: %v", g.body(seq), err)
		}
		if n := len([]rune(b.Text)); n > 60 {
			t.Errorf("%q is %d characters, over the ingest's 60", b.Text, n)
		}
		if got, ok := g.ownSeq(b.Text); !ok || got != seq {
			t.Errorf("ownSeq(%q) = %d, %v; want %d", b.Text, got, ok, seq)
		}
	}
	for _, other := range []string{"hello", "前方高能预警 #other.12", "x #abc12.", "x #abc12.zz!"} {
		if _, ok := g.ownSeq(other); ok {
			t.Errorf("ownSeq(%q) claims it", other)
		}
	}
}

// TestLoadgenScheduleTimes: each event's scheduled time is the inverse of
// cumulative, so the pacer stamps event n with the moment the audience
// meant to send it.
func TestLoadgenScheduleTimes(t *testing.T) {
	for _, s := range []schedule{
		{base: 1200},
		{pulse: true, base: 100, peak: 38000, ramp: 10 * time.Second, hold: 5 * time.Second},
		{pulse: true, peak: 500, ramp: 2 * time.Second, hold: -1},
	} {
		for _, n := range []float64{1, 2, 10, 999, 1000, 1001, 190_000, 190_001, 380_000, 380_050} {
			at, ok := s.timeOf(n)
			if !ok {
				continue
			}
			if c := s.cumulative(at); c < n-1e-6 {
				t.Errorf("%v: event %v at %v, but only %.3f due then", s, n, at, c)
			}
			if c := s.cumulative(at - time.Microsecond); c > n+1e-6 {
				t.Errorf("%v: event %v at %v, but %.3f due a µs before", s, n, at, c)
			}
		}
	}
	if _, ok := (schedule{pulse: true, peak: 100, ramp: time.Second, hold: time.Second}).timeOf(1000); ok {
		t.Error("a pulse falling to no base rate has no 1000th event")
	}
}

// TestLoadgenKeyword: keyword entries are the keyword verbatim, in the
// asked share of comments; the rest stay traced phrases.
func TestLoadgenKeyword(t *testing.T) {
	g, err := New(Config{Keyword: " 抽奖 ", KeywordShare: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	kw := 0
	for seq := int64(0); seq < n; seq++ {
		var b struct{ Text string }
		if err := json.Unmarshal(g.body(seq), &b); err != nil {
			t.Fatal(err)
		}
		_, traced := g.ownSeq(b.Text)
		switch {
		case g.isKeyword(seq) && b.Text == "抽奖" && !traced:
			kw++
		case g.isKeyword(seq) || !traced:
			t.Fatalf("comment %d: %q, keyword %v", seq, b.Text, g.isKeyword(seq))
		}
	}
	if kw < n/4-200 || kw > n/4+200 {
		t.Errorf("%d keyword entries of %d, want about a quarter", kw, n)
	}
	if g, _ := New(Config{Keyword: "x"}); !g.isKeyword(7) || g.cfg.KeywordShare != 1 {
		t.Error("a keyword alone is every comment")
	}
	for _, bad := range []Config{{KeywordShare: 0.5}, {Keyword: "x", KeywordShare: 1.5}, {Keyword: strings.Repeat("长", 61)}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

// TestLoadgenMerge: shards' reports add up, latencies come from the merged
// histograms, the nodes' counters are not counted twice.
func TestLoadgenMerge(t *testing.T) {
	shard := func(attempted, ok int64, lat time.Duration, start time.Time) *Report {
		var h Histogram
		for range attempted {
			h.Observe(lat)
		}
		r := &Report{Version: ReportVersion}
		r.Run = RunInfo{Shards: 2, RatePerSec: 500, Start: start, End: start.Add(12 * time.Second), LoadSeconds: 10}
		r.Barrage = BarrageReport{Due: attempted + 1, HeldBack: 1, Attempted: attempted, OK: ok, Errors: map[string]int64{"503 backend_unavailable": attempted - ok}}
		r.Gifts = GiftsReport{Orders: 3, Accepted: 3, Attempts: 3, Answers: map[string]int64{"200": 3}}
		r.Histograms.BarragePost = h.Data()
		r.Latency = r.Histograms.latencies()
		r.Drops = DropsReport{Accepted: map[string]int64{"barrage": 150}, SilentDrops: 40}
		r.Timeline = []Second{{T: 1, Attempted: attempted / 2}, {T: 2, Attempted: attempted - attempted/2}}
		return r
	}
	t0 := time.Now()
	a, b := shard(100, 90, 10*time.Millisecond, t0), shard(300, 300, 100*time.Millisecond, t0.Add(-time.Second))
	m, err := Merge([]*Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if m.Run.Shards != 2 || m.Run.RatePerSec != 1000 || !m.Run.Start.Equal(t0.Add(-time.Second)) {
		t.Errorf("run: %+v", m.Run)
	}
	br := m.Barrage
	if br.Attempted != 400 || br.OK != 390 || br.Errors["503 backend_unavailable"] != 10 || br.Due != 402 || br.AttemptedPerSec != 40 || br.PeakPerSec != 200 {
		t.Errorf("barrage: %+v", br)
	}
	if m.Gifts.Orders != 6 || m.Gifts.Answers["200"] != 6 {
		t.Errorf("gifts: %+v", m.Gifts)
	}
	if l := m.Latency.BarragePost; l.Count != 400 || math.Abs(l.P50Ms-100) > 3.2 || math.Abs(l.P90Ms-100) > 3.2 || l.MaxMs != 100 {
		t.Errorf("latency: %+v", l)
	}
	if m.Drops.Accepted["barrage"] != 150 || m.Drops.BarrageUnaccounted != 390-150-40 {
		t.Errorf("drops: %+v", m.Drops)
	}
	if a.Barrage.Errors["503 backend_unavailable"] != 10 || a.Drops.Accepted["barrage"] != 150 {
		t.Error("Merge changed its input")
	}
	if _, err := Merge(nil); err == nil {
		t.Error("merged nothing")
	}
	if _, err := Merge([]*Report{{Version: 99}}); err == nil {
		t.Error("merged another version")
	}
}
