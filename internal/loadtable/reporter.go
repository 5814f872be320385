package loadtable

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// Reporter defaults.
const (
	// defaultReportInterval is how often a Reporter looks at the load
	// while it changes (Reporter.Interval).
	defaultReportInterval = 5 * time.Millisecond
	// defaultMaxReportInterval is the longest a node stays silent
	// (Reporter.MaxInterval): four reports within the allocators' default
	// staleness of 1 s, so that three may be late or lost.
	defaultMaxReportInterval = 250 * time.Millisecond
	// defaultMinReportInterval is the shortest time between two reports
	// (Reporter.MinInterval): at most 20 a second per node, whatever its
	// load does; the allocators see a change within 50 ms at worst.
	defaultMinReportInterval = 50 * time.Millisecond
	// maxIdleLook is the longest time between two looks at the load
	// (within MaxInterval/2, so that an idle node looks once between two
	// keep-alive reports and wakes about eight times a second in all).
	maxIdleLook = 125 * time.Millisecond
	// cpuSmoothing is the time constant of the CPU's moving average. A
	// node's CPU, sampled every 100 ms, jumps by several percent from one
	// sample to the next under a steady load; averaged over half a second
	// it moves by what the load does. A step to overload is still seen
	// within a second (0.5 → 1.0 reaches 0.9 in 0.8 s).
	cpuSmoothing = 500 * time.Millisecond
	// headroomStep and headroomFloor: a report is news when the node's
	// headroom (what the allocator hands it out by) moved from the
	// reported one by 5 % of it, and by at least half a percent of the
	// capacity — finer steps near full would turn noise into reports.
	// Between two such reports the allocator's share for the node is off
	// by less than a step.
	headroomStep  = 0.05
	headroomFloor = 0.005
	// boundMargin: a node reported past a bound (CPU, connections) is news
	// again only once its load is a point below the bound, so that a load
	// hovering at the bound does not flap in and out of the hand-out.
	boundMargin = 0.01
)

// Reporter sends a node's load to a Table when what the allocators
// decide from has changed — the node's headroom by a step (ReportGate), a
// bound crossed, draining, capacity, line, region or address — at most
// every MinInterval, and at least every MaxInterval however quiet the node
// is, so that the allocators do not take it for dead. It looks at the load
// every Interval while changes come, less often (up to every 125 ms) while
// they do not. The staleness the allocators judge by must exceed
// MaxInterval.
type Reporter struct {
	Table Table
	// Interval is how often the load is looked at while it changes. Zero:
	// 5 ms.
	Interval time.Duration
	// MaxInterval is the longest time between two reports. Zero: 250 ms;
	// below Interval: a report every Interval whatever changed (the
	// reporter as it first was, kept for comparisons).
	MaxInterval time.Duration
	// MinInterval is the shortest time between two reports (or attempts):
	// the bound on a node's writes. Zero: 50 ms; negative: none. It is at
	// most MaxInterval.
	MinInterval time.Duration
	// Load returns the node's current load; the reporter smooths its CPU
	// and stamps At.
	Load func() NodeLoad
	// Now tells the time (internal/clock's Now). Nil: time.Now.
	Now func() time.Time
	// Ready holds the first report back until it is true: a node that
	// cannot yet verify tokens (its keyring not loaded) must not be handed
	// to clients. Nil: ready at once.
	Ready func() bool
	// Sent counts the reports made, for tests and benchmarks.
	Sent atomic.Int64
	// Reported is when the last report was written (unix ns, by Now) —
	// from Run's start until the first one is: how long the node has been
	// missing from the table, which allocators drop it from after their
	// staleness (a node cut off from the store; its metrics say so).
	Reported atomic.Int64
}

// Silence is how long the node has gone unreported at now: since the last
// report written, or since Run began; 0 before Run.
func (r *Reporter) Silence(now time.Time) time.Duration {
	at := r.Reported.Load()
	if at == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, at)))
}

// Run reports until ctx is done, then removes the node from the table so that
// allocators stop handing it out at once.
func (r *Reporter) Run(ctx context.Context) error {
	g := NewReportGate(r.Interval, r.MinInterval, r.MaxInterval)
	now := r.Now
	if now == nil {
		now = time.Now
	}
	r.Reported.Store(now().UnixNano())
	t := time.NewTimer(g.iv)
	defer t.Stop()
	var id string
	for {
		wait := g.iv
		if r.Ready == nil || r.Ready() {
			at := now()
			if l, ok := g.Look(r.Load(), at); ok {
				l.At = at
				id = l.ID
				err := r.Table.Report(ctx, l)
				g.Done(l, at, err == nil) // a failed report is tried again; staleness handles the rest
				if err == nil {
					r.Sent.Add(1)
					r.Reported.Store(at.UnixNano())
				}
			}
			wait = g.Wait(now())
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if id != "" {
				_ = r.Table.Remove(rctx, id)
			}
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// ReportGate is a Reporter's judgement, look by look, of which loads to
// write, apart from its timer and table, so that a simulation can drive it
// on its own clock. Not safe for concurrent use.
//
// A load is news when what the allocators decide from has changed since
// the last report: the node's headroom (headroom: what an allocator hands
// it out by) moved by a step of 5 % (at least half a point), the node
// crossed its CPU or connection bound (and, back, cleared it by a point),
// or its draining, capacity, line, region or address changed. CPU enters
// smoothed: a moving average over about half a second, which is also what
// the report carries. Connections of a node without a capacity are never
// news: the allocator does not look at them. News is written at most every
// MinInterval; a keep-alive every MaxInterval carries the current load
// whatever it is.
type ReportGate struct {
	iv, minIv, maxIv, maxLook time.Duration
	every                     bool // MaxInterval below Interval: write every look

	cpu      float64   // smoothed
	cpuAt    time.Time // of the last look
	smoothed bool      // cpu holds a value

	last     NodeLoad  // the last load written
	lastAt   time.Time // when
	reported bool
	triedAt  time.Time // the last attempt, written or failed
	tried    bool
	lookAt   time.Time // the last look
	look     time.Duration
	pending  bool // news held back by MinInterval
	news     bool // what the last Look let through was news, not a keep-alive
}

// NewReportGate returns the gate of a Reporter with these intervals (zero
// values as the Reporter's fields document).
func NewReportGate(interval, minInterval, maxInterval time.Duration) *ReportGate {
	g := &ReportGate{iv: interval, minIv: minInterval, maxIv: maxInterval}
	if g.iv <= 0 {
		g.iv = defaultReportInterval
	}
	if g.maxIv == 0 {
		g.maxIv = defaultMaxReportInterval
	}
	g.every = g.maxIv < g.iv
	switch {
	case g.minIv == 0:
		g.minIv = defaultMinReportInterval
	case g.minIv < 0:
		g.minIv = 0
	}
	g.minIv = min(g.minIv, g.maxIv)
	g.maxLook = max(g.iv, min(maxIdleLook, g.maxIv/2))
	g.look = g.iv
	return g
}

// Look takes the node's load at now: it returns the load with its CPU
// smoothed, and whether to write it now. A load let through is to be
// followed by Done.
func (g *ReportGate) Look(l NodeLoad, now time.Time) (NodeLoad, bool) {
	if !g.smoothed {
		g.cpu, g.smoothed = l.CPU, true
	} else if dt := now.Sub(g.cpuAt); dt > 0 {
		g.cpu += -math.Expm1(-float64(dt)/float64(cpuSmoothing)) * (l.CPU - g.cpu)
	}
	g.cpuAt, g.lookAt = now, now
	l.CPU = math.Round(g.cpu*1000) / 1000
	if g.every {
		return l, true
	}
	g.news = !g.reported || isNews(l, g.last)
	if !g.news && now.Sub(g.lastAt) < g.maxIv {
		// Nothing new: look less often, up to maxLook.
		g.pending = false
		g.look = min(2*g.look, g.maxLook)
		return l, false
	}
	if g.tried && now.Sub(g.triedAt) < g.minIv {
		g.pending = true // looked at again when the bound allows
		return l, false
	}
	g.pending = false
	return l, true
}

// Done records how writing the load Look let through went.
func (g *ReportGate) Done(l NodeLoad, now time.Time, ok bool) {
	g.triedAt, g.tried = now, true
	if g.news {
		g.look = g.iv // a change often comes with more
	}
	if ok {
		g.last, g.lastAt, g.reported = l, now, true
	}
}

// Wait is how long after now to look again: at the look interval, at the
// keep-alive when it comes first, or when MinInterval lets held-back news
// through.
func (g *ReportGate) Wait(now time.Time) time.Duration {
	if g.every {
		return g.iv
	}
	next := g.lookAt.Add(g.look)
	if g.reported {
		// The keep-alive, but not sooner than MinInterval (and a look)
		// after a failed attempt.
		keep := g.lastAt.Add(g.maxIv)
		if retry := g.triedAt.Add(max(g.minIv, g.iv)); retry.After(keep) {
			keep = retry
		}
		if keep.Before(next) {
			next = keep
		}
	}
	if g.pending {
		next = g.triedAt.Add(g.minIv)
	}
	return max(next.Sub(now), 0)
}

// isNews reports whether the allocators would decide differently from l
// (now, CPU smoothed) than from last (reported): see ReportGate.
func isNews(l, last NodeLoad) bool { return News(l, last, DefaultOverload, DefaultMaxCPU) }

// News reports whether an allocator with these bounds (its Overload and
// MaxCPU) would decide differently from node load l than from last, the
// same node's earlier load: its headroom moved by a step (5 % of it, at
// least half a point), it crossed a bound (or, back, cleared it by a
// point), or its draining, capacity, line, region or address changed. A
// Reporter writes what is news by the default bounds (ReportGate); a
// View counts the news it reads (SyncStats.News), which an allocator's
// sync interval follows.
func News(l, last NodeLoad, overload, maxCPU float64) bool {
	if l.ID != last.ID || l.Kind != last.Kind || l.Addr != last.Addr || l.Line != last.Line ||
		l.Region != last.Region || l.Capacity != last.Capacity || l.Draining != last.Draining {
		return true
	}
	w0, ok0 := Headroom(last, overload, maxCPU)
	if !ok0 {
		_, clear := Headroom(l, overload-boundMargin, maxCPU-boundMargin)
		return clear
	}
	w, ok := Headroom(l, overload, maxCPU)
	return !ok || math.Abs(w-w0) >= max(headroomStep*w0, headroomFloor)
}
