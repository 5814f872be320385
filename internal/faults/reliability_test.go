package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"danmaku/internal/loadgen"
	"danmaku/internal/redisx"
	"danmaku/internal/testenv"
)

// fault is one row of the table: what it needs of the stack and what it
// does. apply runs at the fault's moment on the test's goroutine and
// returns once the fault has been applied (and, for an outage, lifted).
type fault struct {
	name  string
	opts  stackOpts
	apply func(t *testing.T, s *stack)
}

func kill(name string, sig syscall.Signal) func(t *testing.T, s *stack) {
	return func(t *testing.T, s *stack) { s.procs[name].signal(sig) }
}

// outage is how long the outage rows last (S3 stopped, edge-2 cut off
// from Redis): 10 s in the table, less in its short variant.
var outage = 10 * time.Second

// skewed is a clock row's moment: nothing to do, the node has run off
// since its start; what the gslbs make of the nodes then goes into the
// row's note (a node the gslbs take for stale gets no new viewer, which
// no other column shows).
func skewed(t *testing.T, s *stack) {
	if s.prom == "" { // the short variant runs no Prometheus to ask
		return
	}
	stale, err := s.instant(`max by (kind) (max_over_time(danmaku_gslb_nodes{state="stale"}[5s]))`, "kind")
	if err != nil {
		t.Errorf("gslb node states: %v", err)
	}
	conns, err := s.instant(`max_over_time(danmaku_edge_connections[5s])`, "instance") // a scrape missed under load must not read as 0
	if err != nil {
		t.Errorf("edge connections: %v", err)
	}
	refused, err := s.instant(`sum by (code) (danmaku_edge_handshake_rejections_total) > 0`, "code")
	if err != nil {
		t.Errorf("edge refusals: %v", err)
	}
	s.note = fmt.Sprintf("at the fault the gslbs counted %.0f edge and %.0f ingest nodes stale; connections edge-1 %.0f, edge-2 %.0f",
		stale["edge"], stale["ingest"], conns[s.procs["edge-1"].metrics], conns[s.procs["edge-2"].metrics])
	for _, code := range slices.Sorted(maps.Keys(refused)) {
		s.note += fmt.Sprintf("; edges refused %.0f handshakes %s", refused[code], code)
	}
}

var faultRows = []fault{
	{name: "slicer leader SIGKILL", apply: func(t *testing.T, s *stack) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		id, err := s.leader(ctx)
		if err != nil {
			t.Fatalf("room leader: %v", err)
		}
		node, _, _ := strings.Cut(id, "#") // the lease holds "node#token"
		p, ok := s.procs[node]
		if !ok {
			t.Fatalf("room leader %q is none of the slicers", id)
		}
		p.signal(syscall.SIGKILL)
	}},
	{name: "edge SIGKILL (edge-1 and its viewers)", apply: kill("edge-1", syscall.SIGKILL)},
	{name: "edge SIGTERM (edge-1 drains over " + edgeDrain + ")", apply: kill("edge-1", syscall.SIGTERM)},
	{name: "ingest SIGKILL", apply: kill("ingest-1", syscall.SIGKILL)},
	{name: "gslb SIGKILL", apply: kill("gslb-1", syscall.SIGKILL)},
	{name: "S3 stopped 10 s", apply: func(t *testing.T, s *stack) {
		s.s3srv.Stop()
		time.Sleep(outage) // the outage itself
		s.s3srv.Start()
	}},
	{name: "Varnish restarted (cache emptied)", apply: func(t *testing.T, s *stack) {
		s.varnish.Stop()
		s.varnish.Start()
	}},
	{name: "Redis Cluster master failover, graceful (gift-wait-replicas 1)", opts: stackOpts{cluster: true}, apply: func(t *testing.T, s *stack) {
		m := s.cluster.MasterOf(t, redisx.RoomKey(room, "live"))
		s.cluster.ReplicaOf(t, m).Failover(t)
	}},
	// One replica a master: the promoted replica has none until its old
	// master, restarted by its supervisor, rejoins as its replica; until
	// then the room's new gift orders are refused unstored.
	{name: "Redis Cluster master SIGKILL, restarted by its supervisor (gift-wait-replicas 1)", opts: stackOpts{cluster: true}, apply: func(t *testing.T, s *stack) {
		m := s.cluster.MasterOf(t, redisx.RoomKey(room, "live"))
		r := s.cluster.ReplicaOf(t, m)
		m.Kill()
		awaitPromotion(t, r)
		m.Start(t)
	}},
	{name: "Redis Cluster master SIGKILL, 2 replicas a master (gift-wait-replicas 1)", opts: stackOpts{cluster: true, replicas: 2}, apply: func(t *testing.T, s *stack) {
		s.cluster.MasterOf(t, redisx.RoomKey(room, "live")).Kill()
	}},
	// A clock fault is there from the node's start (a host whose clock is
	// off, not a step: a constant offset keeps its intervals exact); the
	// row's moment only splits the alerts into before and after.
	{name: "ingest-1 clock 2 s ahead", opts: stackOpts{clocks: map[string]string{"ingest-1": "2s"}}, apply: skewed},
	{name: "edge-2 clock 2 s behind", opts: stackOpts{clocks: map[string]string{"edge-2": "-2s"}}, apply: skewed},
	{name: "slicer-1 clock 2 s behind", opts: stackOpts{clocks: map[string]string{"slicer-1": "-2s"}}, apply: skewed},
	{name: "edge-2 partitioned from Redis 10 s", opts: stackOpts{partitionEdge: true}, apply: func(t *testing.T, s *stack) {
		s.edgeRedis.Cut()
		time.Sleep(outage) // the partition itself
		s.edgeRedis.Restore()
	}},
}

// awaitPromotion waits until replica r reports the master role (its
// master failed over to it), for at most a minute.
func awaitPromotion(t *testing.T, r *testenv.ClusterNode) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		if role, err := r.Role(); err == nil && role == "master" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not promoted a minute after its master's kill", r.Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// envInt reads a positive integer setting, or def.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// showLoad is the load of the issue, scaled by the environment the
// Makefile sets (VIEWERS, SENDERS, GIFTS).
func showLoad(t *testing.T, offer time.Duration) load {
	return load{
		viewers: envInt(t, "DANMAKU_FAULTS_VIEWERS", 1000),
		senders: envInt(t, "DANMAKU_FAULTS_SENDERS", 200),
		gifts:   float64(envInt(t, "DANMAKU_FAULTS_GIFTS", 20)),
		offer:   offer,
		// How long the viewers get after the offer to receive what was
		// sent: a machine too small for the load delivers late, and a
		// longer drain tells late from lost.
		drain: time.Duration(envInt(t, "DANMAKU_FAULTS_DRAIN_SECONDS", 20)) * time.Second,
	}
}

// TestReliability is `make reliability`: each fault row on its own fresh
// stack under load, the table written into docs/reliability.md. Heavy
// (about a minute a row, both cores): it runs only with
// DANMAKU_RELIABILITY=1. DANMAKU_FAULTS_ROWS (a regexp) picks rows.
func TestReliability(t *testing.T) {
	if os.Getenv("DANMAKU_RELIABILITY") == "" {
		t.Skip("the fault table under load takes minutes; set DANMAKU_RELIABILITY=1 (make reliability)")
	}
	pick := regexp.MustCompile(os.Getenv("DANMAKU_FAULTS_ROWS"))
	warm := time.Duration(envInt(t, "DANMAKU_FAULTS_WARM_SECONDS", 10)) * time.Second
	offer := time.Duration(envInt(t, "DANMAKU_FAULTS_SECONDS", 40)) * time.Second
	l := showLoad(t, offer)
	var rows []Row
	for _, f := range faultRows {
		if !pick.MatchString(f.name) {
			continue
		}
		var row Row
		ok := t.Run(f.name, func(t *testing.T) { row = runRow(t, f, l, warm) })
		if !ok && row.Fault == "" {
			row = Row{Fault: f.name, Incomplete: true, Note: "the row did not complete (see the test log)"}
		}
		rows = append(rows, row)
		t.Logf("\n%s", Markdown([]Row{row}))
	}
	table := fmt.Sprintf("Load: %d viewers polling the CDN and holding the edge, %d senders at the SDK's send throttle (%.0f comments/s), %.0f gifts/s; %v of offer, the fault at %v; one run, %s.\n\n%s",
		l.viewers, l.senders, float64(l.senders)/1.2, l.gifts, offer, warm, time.Now().UTC().Format("2006-01-02"), Markdown(rows))
	writeTable(t, "fault-table", table)
	fmt.Println(table)
	for _, r := range rows {
		if !r.Pass() {
			t.Errorf("%s: gifts not exactly once: %+v", r.Fault, r)
		}
	}
}

// runRow runs one fault on a fresh stack and measures it.
func runRow(t *testing.T, f fault, l load, warm time.Duration) Row {
	s := newStack(t, f.opts)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	cn := s.startCanary(ctx, &wg)
	lr := s.startLoad(l)
	offerStart := lr.awaitOffer(t)
	time.Sleep(time.Until(offerStart.Add(warm)))
	faultAt := time.Now()
	f.apply(t, s)
	var err error
	select {
	case err = <-lr.done:
	case <-time.After(l.offer + l.drain + 3*time.Minute):
		t.Fatalf("loadgen did not end\n%s", tail(lr.output(), 30))
	}
	end := time.Now()
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, tail(lr.output(), 30))
	}
	rep, err := lr.report()
	if err != nil {
		t.Fatal(err)
	}
	row := rowOf(f.name, rep)
	logNetworkErrors(t, f.name, rep)
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	row.GiftsInSegments, row.GiftsSegmentDoubled, err = s.segmentGifts(sctx)
	if err != nil {
		t.Errorf("segments: %v", err)
	}
	var before, after []string
	if s.prom != "" { // the short variant runs no Prometheus
		if before, err = s.alerts(offerStart.Add(-5*time.Second), faultAt.Add(-time.Second)); err != nil {
			t.Errorf("alerts: %v", err)
		}
		if after, err = s.alerts(faultAt, end); err != nil {
			t.Errorf("alerts: %v", err)
		}
	}
	for _, a := range after {
		if slices.Contains(before, a) {
			a += " also before the fault"
		}
		row.Alerts = append(row.Alerts, a)
	}
	for _, e := range rep.Drops.ScrapeErrors {
		if strings.Contains(e, s.procs["ingest-1"].metrics) || strings.Contains(e, s.procs["ingest-2"].metrics) {
			row.Note = "admitted counts the surviving ingest only (the killed one's counters are gone)"
		}
	}
	if s.note != "" {
		row.Note = strings.TrimPrefix(row.Note+"; "+s.note, "; ")
	}
	row.Recovery, row.Unwell = recovery(faultAt, offerStart, rep.Timeline, cn.unwell(), l.gifts > 0)
	return row
}

// logNetworkErrors logs the first raw text of each class of transport
// failure the load met: what its "network: eof" counts were.
func logNetworkErrors(t *testing.T, name string, rep *loadgen.Report) {
	for _, k := range slices.Sorted(maps.Keys(rep.NetworkErrors)) {
		t.Logf("%s: network %s, first seen as: %s", name, k, rep.NetworkErrors[k])
	}
}

// rowOf reads the load's report into a row.
func rowOf(name string, rep *loadgen.Report) Row {
	d := rep.Delivery
	r := Row{
		Fault:         name,
		GiftsAccepted: rep.Gifts.Accepted + rep.Gifts.DuplicateAfterRetry,
		GiftsToAll:    d.GiftsShownByAll,
		Lost:          d.GiftPairsMissing, Doubled: d.GiftPairsDoubled,
		Viewers: d.Joined, ViewersAsked: d.Pollers,
		BarrageOK: rep.Barrage.OK, BarrageAdmitted: rep.Drops.Accepted["barrage"], BarrageShown: d.CommentsShown,
		JumpsToLive: d.JumpsToLive, SeqGaps: d.SeqGaps,
		Errors: map[string]int64{},
	}
	for k, v := range rep.Barrage.Errors {
		r.Errors["barrage "+k] += v
	}
	for k, v := range rep.Gifts.Answers {
		if k != "200" {
			r.Errors["gift "+k] += v
		}
	}
	if rep.Gifts.NotOffered > 0 {
		// Not an answer: every gift worker was waiting on earlier orders.
		r.Errors["gift orders not sent (workers busy)"] += rep.Gifts.NotOffered
	}
	if rep.Gifts.Failed > 0 {
		r.Errors["gift orders given up"] += rep.Gifts.Failed
	}
	for k, v := range rep.Users.EntryErrors {
		r.Errors["entry "+k] += v
	}
	for k, v := range d.JoinErrors {
		r.Errors["viewer join "+k] += v
	}
	if d.FetchErrors > 0 {
		r.Errors["segment fetch errors"] += d.FetchErrors
	}
	if d.Untracked > 0 {
		// The generator lost track of decodes: its delivery counts are
		// low, and the row can say nothing of gifts lost.
		r.Incomplete = true
		r.Note = fmt.Sprintf("the generator lost track of %d decodes (Untracked): delivery not measured", d.Untracked)
	}
	return r
}

// recovery is the time from the fault to the end of the last moment the
// stack was unwell after it: a second of the load's timeline with comment
// errors, or with no gift accepted (when gifts are offered), or a moment
// the canary viewer had no new segment for 2 s or one over 2 s late.
func recovery(faultAt, offerStart time.Time, timeline []loadgen.Second, canary []time.Time, gifts bool) (time.Duration, string) {
	var last time.Time
	why := ""
	if len(timeline) > 0 {
		timeline = timeline[:len(timeline)-1] // the offer's last second may be partial
	}
	for _, sec := range timeline {
		at := offerStart.Add(time.Duration(sec.T * float64(time.Second)))
		if at.Before(faultAt) {
			continue
		}
		switch {
		case sec.Errors > 0:
			if at.After(last) {
				last, why = at, "comment errors"
			}
		case gifts && sec.GiftsOK == 0:
			if at.After(last) {
				last, why = at, "no gift accepted"
			}
		}
	}
	for _, at := range canary {
		if at.After(faultAt) && at.After(last) {
			last, why = at, "segments stalled"
		}
	}
	if last.IsZero() {
		return 0, ""
	}
	return last.Sub(faultAt), why
}

// writeTable puts table between name's markers in docs/reliability.md
// when DANMAKU_FAULTS_WRITE is 1, or writes it alone to the file that
// variable names otherwise.
func writeTable(t *testing.T, name, table string) {
	dest := os.Getenv("DANMAKU_FAULTS_WRITE")
	switch dest {
	case "":
		return
	case "1":
		const doc = "../../docs/reliability.md"
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ReplaceBetween(string(b), name, table)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		if err := os.WriteFile(dest, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
