package gslbsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"danmaku/gslb"
	"danmaku/internal/clock"
)

// epoch is the simulated wall time at t = 0; any fixed instant will do.
var epoch = time.Date(2030, 1, 1, 20, 0, 0, 0, time.UTC)

// trace is what every strategy replays: the same joins, at the same times,
// through the same allocator instances, for the same sessions.
type trace struct {
	at     []int64 // join time, ns since epoch, ascending
	inst   []uint8 // allocator instance asked
	leave  []int64 // departure time
	jitter []int64 // wait before reconnecting, should the viewer's edge die
}

// cluster is the node set every strategy runs on.
type cluster struct {
	edges   []gslb.NodeLoad // Conns filled in per run
	ingests []gslb.NodeLoad
	victim  int     // index into edges of the edge that dies; -1: none
	phase   []int64 // report phase per node, edges then ingests
	sync    []int64 // sync phase per allocator instance
}

func newTrace(c Config) *trace {
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	tr := &trace{
		at:     make([]int64, c.Arrivals),
		inst:   make([]uint8, c.Arrivals),
		leave:  make([]int64, c.Arrivals),
		jitter: make([]int64, c.Arrivals),
	}
	gap := float64(time.Second) / c.Rate
	t := 0.0
	for i := range tr.at {
		t += rng.ExpFloat64() * gap
		tr.at[i] = int64(t)
		tr.inst[i] = uint8(rng.IntN(c.Allocators))
		tr.leave[i] = tr.at[i] + int64(rng.ExpFloat64()*float64(c.MeanSession))
		if c.ReconnectJitter > 0 {
			tr.jitter[i] = rng.Int64N(int64(c.ReconnectJitter))
		}
	}
	return tr
}

// capacityMix is the share of edges per capacity multiple; see
// Config.BaseCapacity.
var capacityMix = []struct {
	share, mult float64
}{{0.1, 2}, {0.2, 1.5}, {0.5, 1}, {0.2, 0.5}}

func newCluster(c Config) (*cluster, error) {
	rng := rand.New(rand.NewPCG(c.Seed, 2))
	mults := make([]float64, 0, c.Edges)
	for _, m := range capacityMix {
		for n := int(math.Round(m.share * float64(c.Edges))); n > 0 && len(mults) < c.Edges; n-- {
			mults = append(mults, m.mult)
		}
	}
	for len(mults) < c.Edges {
		mults = append(mults, 1)
	}
	rng.Shuffle(len(mults), func(i, j int) { mults[i], mults[j] = mults[j], mults[i] })
	cl := &cluster{victim: -1}
	for i, m := range mults {
		id := fmt.Sprintf("edge-%03d", i)
		cl.edges = append(cl.edges, gslb.NodeLoad{
			ID: id, Kind: gslb.KindEdge, Addr: "ws://" + id + ".sim:7702/v1/ws",
			Capacity: max(1, int(m*float64(c.BaseCapacity))),
		})
	}
	for i := range c.Ingests {
		id := fmt.Sprintf("ingest-%d", i)
		// Capacity 0: unlimited. Ingest choice is per user and does not
		// move edges; the ingests are here because Allocate needs one.
		cl.ingests = append(cl.ingests, gslb.NodeLoad{ID: id, Kind: gslb.KindIngest, Addr: "http://" + id + ".sim:7701"})
	}
	if c.KillAt > 0 {
		if c.Kill == "" {
			for i, e := range cl.edges {
				if cl.victim < 0 || e.Capacity > cl.edges[cl.victim].Capacity {
					cl.victim = i
				}
			}
		} else {
			for i, e := range cl.edges {
				if e.ID == c.Kill {
					cl.victim = i
				}
			}
			if cl.victim < 0 {
				return nil, fmt.Errorf("gslbsim: no edge %q to kill", c.Kill)
			}
		}
	}
	for range len(cl.edges) + len(cl.ingests) {
		cl.phase = append(cl.phase, rng.Int64N(int64(c.Report)))
	}
	for range c.Allocators {
		cl.sync = append(cl.sync, rng.Int64N(int64(c.Sync)))
	}
	return cl, nil
}

// Run replays one trace built from cfg against each strategy, concurrently,
// and returns one Result per strategy in the order given.
func Run(ctx context.Context, cfg Config, strategies ...Strategy) ([]Result, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(strategies) == 0 {
		return nil, errors.New("gslbsim: no strategy")
	}
	tr := newTrace(c)
	cl, err := newCluster(c)
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(strategies))
	errs := make([]error, len(strategies))
	var wg sync.WaitGroup
	for i, s := range strategies {
		wg.Go(func() {
			r, err := newSim(c, tr, cl, s)
			if err == nil {
				err = r.run(ctx)
			}
			if err != nil {
				errs[i] = fmt.Errorf("gslbsim: %s: %w", s.Name, err)
				return
			}
			out[i] = r.res
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Event kinds, in the order they happen at one instant: a death before
// anything that could still see the node alive, a report before the sync
// that reads it, the sample last so it sees everything up to its time.
const (
	evKill uint8 = iota
	evLeave
	evReconnect
	evReport
	evSync
	evSample
)

type event struct {
	t    int64
	id   int32
	kind uint8
}

func (a event) less(b event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.id < b.id
}

// events is a binary min-heap; written out rather than container/heap to
// keep a million pushes free of interface calls.
type events []event

func (h *events) push(e event) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *events) pop() event {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(s) && s[l].less(s[m]) {
			m = l
		}
		if r := l + 1; r < len(s) && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// A viewer's edge, or one of these.
const (
	viewerWaiting int16 = -1 // its edge died; it has not reconnected yet
	viewerGone    int16 = -2 // left, or was never placed
)

type viewer struct {
	edge int16
	alts [3]int16 // the allocation's edges, as indexes; -1 past its end
}

// sim is one strategy's run. It is single-goroutine.
type sim struct {
	cfg      Config
	tr       *trace
	cl       *cluster
	clk      *clock.Fake
	table    *gslb.MemoryLoadTable
	gates    []*gslb.ReportGate // per node, edges then ingests; nil: every look written
	pickers  []Picker
	byAddr   map[string]int16
	conns    []int
	alive    []bool
	viewers  []viewer
	ev       events
	end      int64
	killedAt int64
	// Reconnections of the dead edge's viewers, and arrivals handed the
	// dead edge first, per edge that took them.
	reconnected []int
	redirected  []int
	// headroomAtKill is each live edge's free capacity when the victim
	// died, up to the overload threshold.
	headroomAtKill []int
	res            Result
}

func newSim(c Config, tr *trace, cl *cluster, s Strategy) (*sim, error) {
	r := &sim{
		cfg: c, tr: tr, cl: cl,
		clk:         clock.NewFake(epoch),
		table:       gslb.NewMemoryLoadTable(),
		byAddr:      make(map[string]int16, len(cl.edges)),
		conns:       make([]int, len(cl.edges)),
		alive:       make([]bool, len(cl.edges)),
		viewers:     make([]viewer, len(tr.at)),
		reconnected: make([]int, len(cl.edges)),
		redirected:  make([]int, len(cl.edges)),
		killedAt:    -1,
	}
	for i, e := range cl.edges {
		r.byAddr[e.Addr] = int16(i)
		r.alive[i] = true
	}
	if !c.Ungated {
		for range len(cl.edges) + len(cl.ingests) {
			r.gates = append(r.gates, gslb.NewReportGate(c.Report, 0, 0))
		}
	}
	// Viewers yet to join are on no edge: the zero value would put them on
	// edge 0, and a death of edge 0 would move them.
	for i := range r.viewers {
		r.viewers[i] = viewer{edge: viewerGone, alts: [3]int16{-1, -1, -1}}
	}
	for i := range c.Allocators {
		p, err := s.New(r.table, r.clk, c.Seed*1000+uint64(i))
		if err != nil {
			return nil, err
		}
		r.pickers = append(r.pickers, p)
	}
	r.res.Strategy = s.Name
	r.res.Arrivals = len(tr.at)
	r.end = tr.at[len(tr.at)-1]
	if cl.victim >= 0 {
		r.end = max(r.end, int64(c.KillAt+c.ReconnectJitter))
	}
	return r, nil
}

func (r *sim) setClock(t int64) { r.clk.Set(epoch.Add(time.Duration(t))) }

func (r *sim) run(ctx context.Context) error {
	// Nodes are up and allocators synced before the doors open; from then
	// on each keeps its own phase.
	for i := range len(r.cl.edges) + len(r.cl.ingests) {
		wait, err := r.report(ctx, i)
		if err != nil {
			return err
		}
		r.ev.push(event{t: r.cl.phase[i] + wait, kind: evReport, id: int32(i)})
	}
	for i, p := range r.pickers {
		if err := p.Sync(ctx); err != nil {
			return fmt.Errorf("first sync: %w", err)
		}
		r.ev.push(event{t: r.cl.sync[i] + int64(r.cfg.Sync), kind: evSync, id: int32(i)})
	}
	r.ev.push(event{t: int64(r.cfg.Sample), kind: evSample})
	if r.cl.victim >= 0 {
		r.ev.push(event{t: int64(r.cfg.KillAt), kind: evKill})
	}
	for i := 0; ; {
		next := int64(math.MaxInt64)
		if i < len(r.tr.at) {
			next = r.tr.at[i]
		}
		if len(r.ev) > 0 && r.ev[0].t <= next && r.ev[0].t <= r.end {
			if err := r.handle(ctx, r.ev.pop()); err != nil {
				return err
			}
			continue
		}
		if i == len(r.tr.at) {
			break
		}
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err := r.arrive(i); err != nil {
			return err
		}
		i++
	}
	// The last sample is taken at the end, wherever the sample grid falls.
	if n := len(r.res.Samples); n == 0 || r.res.Samples[n-1].At != time.Duration(r.end) {
		r.sample(r.end)
	}
	r.summarise()
	return r.check()
}

func (r *sim) handle(ctx context.Context, e event) error {
	r.setClock(e.t)
	switch e.kind {
	case evReport:
		if int(e.id) == r.cl.victim && r.killedAt >= 0 {
			return nil // dead: silent from now on, its last report goes stale
		}
		wait, err := r.report(ctx, int(e.id))
		if err != nil {
			return err
		}
		r.ev.push(event{t: e.t + wait, kind: evReport, id: e.id})
	case evSync:
		// A failed sync keeps the instance's last view, as in production;
		// the memory table does not fail.
		_ = r.pickers[e.id].Sync(ctx)
		r.ev.push(event{t: e.t + int64(r.cfg.Sync), kind: evSync, id: e.id})
	case evSample:
		r.sample(e.t)
		r.ev.push(event{t: e.t + int64(r.cfg.Sample), kind: evSample})
	case evKill:
		r.kill(e.t)
	case evLeave:
		v := &r.viewers[e.id]
		if v.edge >= 0 {
			r.conns[v.edge]--
		}
		if v.edge == viewerWaiting {
			r.res.Killed.Left++
		}
		if v.edge != viewerGone {
			r.res.Departed++
		}
		v.edge = viewerGone
	case evReconnect:
		return r.reconnect(int(e.id))
	}
	return nil
}

// report is node i's look at its load: written when its gate lets it
// through (every look when ungated). It returns the time to its next look.
func (r *sim) report(ctx context.Context, i int) (int64, error) {
	var l gslb.NodeLoad
	if i < len(r.cl.edges) {
		l = r.cl.edges[i]
		l.Conns = r.conns[i]
	} else {
		l = r.cl.ingests[i-len(r.cl.edges)]
	}
	now := r.clk.Now()
	if r.gates == nil {
		l.At = now
		r.res.Reports++
		return int64(r.cfg.Report), r.table.Report(ctx, l)
	}
	g := r.gates[i]
	if l, ok := g.Look(l, now); ok {
		l.At = now
		err := r.table.Report(ctx, l)
		g.Done(l, now, err == nil)
		if err != nil {
			return 0, err
		}
		r.res.Reports++
	}
	return int64(max(g.Wait(now), 1)), nil
}

// arrive asks the viewer's allocator instance and dials the first live
// address of the answer.
func (r *sim) arrive(i int) error {
	t := r.tr.at[i]
	r.setClock(t)
	v := &r.viewers[i]
	addrs, err := r.pickers[r.tr.inst[i]].Pick("u" + strconv.Itoa(i))
	if err != nil {
		r.res.Refused++
		return nil
	}
	v.alts = [3]int16{-1, -1, -1}
	for k, a := range addrs[:min(len(addrs), len(v.alts))] {
		e, ok := r.byAddr[a]
		if !ok {
			return fmt.Errorf("arrival %d handed unknown address %q", i, a)
		}
		v.alts[k] = e
	}
	at := r.firstLive(v.alts)
	if at < 0 {
		r.res.Refused++ // every address handed out is dead
		return nil
	}
	e := v.alts[at]
	if at > 0 {
		r.redirected[e]++
		r.res.Redirected++
	}
	r.connect(v, e)
	r.res.Placed++
	if r.tr.leave[i] <= r.end {
		r.ev.push(event{t: r.tr.leave[i], kind: evLeave, id: int32(i)})
	}
	return nil
}

// firstLive returns the position of the first live edge in alts, or -1.
// The viewer learns an edge is dead from a failed dial, so it tries them in
// order, as sdk.Client's edge loop does.
func (r *sim) firstLive(alts [3]int16) int {
	for k, e := range alts {
		if e >= 0 && r.alive[e] {
			return k
		}
	}
	return -1
}

func (r *sim) connect(v *viewer, e int16) {
	v.edge = e
	r.conns[e]++
	if r.killedAt >= 0 && !r.alive[e] {
		r.res.PlacedOnDead++ // must stay 0; counted apart from conns to check firstLive
	}
}

func (r *sim) kill(t int64) {
	x := r.cl.victim
	r.killedAt = t
	r.alive[x] = false
	r.headroomAtKill = make([]int, len(r.cl.edges))
	for e := range r.cl.edges {
		if r.alive[e] {
			// Free capacity up to where allocators drop the edge.
			r.headroomAtKill[e] = max(0, int(viewOverload*float64(r.cl.edges[e].Capacity))-r.conns[e])
		}
	}
	for i := range r.viewers {
		if v := &r.viewers[i]; v.edge == int16(x) {
			v.edge = viewerWaiting
			r.res.Killed.Viewers++
			r.ev.push(event{t: t + r.tr.jitter[i], kind: evReconnect, id: int32(i)})
		}
	}
	r.conns[x] = 0
}

// reconnect dials the first live address the viewer was handed at join
// time; with none left it asks its allocator again, as the SDK re-joins.
func (r *sim) reconnect(i int) error {
	v := &r.viewers[i]
	if v.edge != viewerWaiting {
		return nil // left before its wait was over
	}
	at := r.firstLive(v.alts)
	if at < 0 {
		addrs, err := r.pickers[r.tr.inst[i]].Pick("u" + strconv.Itoa(i))
		if err != nil {
			r.res.Killed.Lost++
			v.edge = viewerGone
			return nil
		}
		v.alts = [3]int16{-1, -1, -1}
		for k, a := range addrs[:min(len(addrs), len(v.alts))] {
			e, ok := r.byAddr[a]
			if !ok {
				return fmt.Errorf("rejoin %d handed unknown address %q", i, a)
			}
			v.alts[k] = e
		}
		r.res.Killed.Rejoined++
		if at = r.firstLive(v.alts); at < 0 {
			r.res.Killed.Lost++
			v.edge = viewerGone
			return nil
		}
	}
	e := v.alts[at]
	r.reconnected[e]++
	r.res.Killed.Reconnected++
	r.connect(v, e)
	return nil
}

func (r *sim) sample(t int64) {
	var conns, capacity int
	hi := 0.0
	for e, n := range r.cl.edges {
		if !r.alive[e] {
			continue
		}
		conns += r.conns[e]
		capacity += n.Capacity
		hi = max(hi, float64(r.conns[e])/float64(n.Capacity))
	}
	r.res.Samples = append(r.res.Samples, Sample{At: time.Duration(t), Max: hi, Mean: float64(conns) / float64(capacity)})
}

// check recounts every viewer and compares with the per-edge counters the
// samples were taken from.
func (r *sim) check() error {
	count := make([]int, len(r.cl.edges))
	waiting := 0
	for _, v := range r.viewers {
		switch {
		case v.edge >= 0:
			count[v.edge]++
		case v.edge == viewerWaiting:
			waiting++
		}
	}
	total := 0
	for e := range count {
		if count[e] != r.conns[e] {
			return fmt.Errorf("accounting: %s counts %d viewers, holds %d", r.cl.edges[e].ID, r.conns[e], count[e])
		}
		total += count[e]
	}
	res := &r.res
	if want := res.Placed + res.Killed.Reconnected - res.Killed.Viewers - (res.Departed - res.Killed.Left); total != want {
		return fmt.Errorf("accounting: %d viewers connected, want %d", total, want)
	}
	if res.Placed+res.Refused != res.Arrivals {
		return fmt.Errorf("accounting: %d placed + %d refused != %d arrivals", res.Placed, res.Refused, res.Arrivals)
	}
	if res.Killed.Viewers != res.Killed.Reconnected+res.Killed.Lost+res.Killed.Left+waiting {
		return fmt.Errorf("accounting: the dead edge's %d viewers: %d reconnected, %d lost, %d left, %d waiting",
			res.Killed.Viewers, res.Killed.Reconnected, res.Killed.Lost, res.Killed.Left, waiting)
	}
	res.Connected = total
	return nil
}

// summarise turns the samples and the kill counters into the Result's
// figures.
func (r *sim) summarise() {
	res := &r.res
	var ratios []float64
	for _, s := range res.Samples {
		if s.At < r.cfg.WarmUp || s.Mean == 0 {
			continue
		}
		ratios = append(ratios, s.Ratio())
		if s.Ratio() > res.Worst.Ratio() {
			res.Worst = s
		}
	}
	res.Final = res.Samples[len(res.Samples)-1]
	if nodes := len(r.cl.edges) + len(r.cl.ingests); r.end > 0 {
		res.ReportRate = float64(res.Reports) / float64(nodes) / time.Duration(r.end).Seconds()
	}
	res.Classes = r.classes()
	slices.Sort(ratios)
	res.P50, res.P95 = percentile(ratios, 0.50), percentile(ratios, 0.95)
	if r.cl.victim < 0 {
		return
	}
	k := &res.Killed
	k.Edge = r.cl.edges[r.cl.victim].ID
	k.Capacity = r.cl.edges[r.cl.victim].Capacity
	k.At = time.Duration(r.killedAt)
	k.Spread = spread(r.cl.edges, r.reconnected, r.headroomAtKill)
	res.RedirectedSpread = spread(r.cl.edges, r.redirected, r.headroomAtKill)
}

func (r *sim) classes() []Class {
	var cs []Class
	for e, n := range r.cl.edges {
		if !r.alive[e] {
			continue
		}
		i := slices.IndexFunc(cs, func(c Class) bool { return c.Capacity == n.Capacity })
		if i < 0 {
			i = len(cs)
			cs = append(cs, Class{Capacity: n.Capacity})
		}
		c := &cs[i]
		c.Edges++
		c.Use += float64(r.conns[e]) // connections until divided below
		c.Max = max(c.Max, float64(r.conns[e])/float64(n.Capacity))
	}
	for i := range cs {
		cs[i].Use /= float64(cs[i].Capacity * cs[i].Edges)
	}
	slices.SortFunc(cs, func(a, b Class) int { return b.Capacity - a.Capacity })
	return cs
}

// percentile of sorted xs, nearest rank.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(math.Ceil(p*float64(len(xs))))-1)]
}

// spread measures how got (viewers per edge) follows headroom: a fair
// spread hands each live edge a share proportional to its free capacity.
func spread(edges []gslb.NodeLoad, got, headroom []int) Spread {
	var s Spread
	total, room := 0, 0
	for e := range got {
		total += got[e]
		room += headroom[e]
		if got[e] > 0 {
			s.Edges++
		}
	}
	s.Viewers = total
	if total == 0 || room == 0 {
		return s
	}
	top := 0
	for e := range got {
		if got[e] > got[top] {
			top = e
		}
	}
	s.MaxEdge = edges[top].ID
	s.MaxShare = float64(got[top]) / float64(total)
	s.FairShare = float64(headroom[top]) / float64(room)
	// Coefficient of variation of viewers per unit of headroom over the
	// edges that had headroom: 0 when every edge got exactly its share.
	var xs []float64
	for e := range got {
		if headroom[e] > 0 {
			xs = append(xs, float64(got[e])/float64(headroom[e]))
		}
	}
	mean, sq := 0.0, 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if mean == 0 {
		// Every viewer went to edges that had no room left.
		s.CV = math.Inf(1)
		return s
	}
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	s.CV = math.Sqrt(sq/float64(len(xs))) / mean
	return s
}
