package gslbsim

import (
	"errors"
	"math"
	"time"
)

// Defaults: the full run the issue asks for — one million joins at
// 500,000/s onto 100 edges, eight allocator instances, 5 ms reports and syncs.
const (
	defaultSeed         = 1
	defaultEdges        = 100
	defaultIngests      = 4
	defaultBaseCapacity = 15_000
	defaultAllocators   = 8
	defaultArrivals     = 1_000_000
	defaultRate         = 500_000
	defaultMeanSession  = 10 * time.Second
	defaultReport       = 5 * time.Millisecond
	defaultSync         = 5 * time.Millisecond
	defaultSample       = 10 * time.Millisecond
)

// Config describes one simulated run. Every zero field takes its default.
type Config struct {
	// Seed makes the run: the trace, the capacity mix, the phases and the
	// random draws all derive from it. Zero: 1.
	Seed uint64
	// Edges is the number of edge nodes. Zero: 100.
	Edges int
	// Ingests is the number of ingest nodes; the allocator answers only
	// when it has one, so they report too. Zero: 4.
	Ingests int
	// BaseCapacity is the connection capacity of a 1× edge. The mix is a
	// tenth of the edges at 2×, a fifth at 1.5×, half at 1× and a fifth at
	// 0.5× (110 × BaseCapacity in all for 100 edges), shuffled over the
	// edge ids by Seed: new large machines beside old small ones. Zero:
	// 15,000, so that the default trace ends near 55 % of the total — a
	// ten-million-viewer event at a tenth of its size.
	BaseCapacity int
	// Allocators is the number of allocator instances; each arrival asks
	// one at random. Zero: 8.
	Allocators int
	// Arrivals is the number of joins in the trace. Zero: 1,000,000.
	Arrivals int
	// Rate is the mean number of joins per second (a Poisson process).
	// Zero: 500,000.
	Rate float64
	// MeanSession is the mean of the exponential session lengths. Concert
	// sessions last minutes; ten seconds keeps some churn inside a
	// two-second trace (about 9 % of the joins leave within it). Zero: 10 s.
	MeanSession time.Duration
	// Report is how often every node looks at its load while it changes,
	// each at its own phase: gslb.Reporter's Interval. What it writes goes
	// through a gslb.ReportGate, as the Reporter's reports do. Zero: 5 ms,
	// as gslb.Reporter.
	Report time.Duration
	// Ungated writes every look, every Report interval whatever changed
	// (the reports the allocator was first tuned with), for comparison.
	Ungated bool
	// Sync is how often every allocator instance syncs the table, each at
	// its own phase. Zero: 5 ms, as gslb.Allocator.
	Sync time.Duration
	// Sample is how often utilisation is measured. Zero: 10 ms.
	Sample time.Duration
	// WarmUp leaves the first samples out of the worst and the
	// percentiles: while nodes hold a few dozen viewers, one hand-out block
	// is a large share of any of them. Zero: a tenth of the trace.
	WarmUp time.Duration
	// KillAt is when one edge dies. Zero: half way through the trace;
	// negative: no edge dies.
	KillAt time.Duration
	// Kill is the id of the edge that dies. Empty: the first of the
	// largest, which strands the most viewers.
	Kill string
	// ReconnectJitter bounds the uniform random wait of a dead edge's
	// viewers before they dial their fallbacks. The SDK waits up to 3 s;
	// the wait changes when they land, not where (the fallback list is
	// fixed at join time), so by default it is squeezed into the rest of
	// the trace. Zero: from KillAt to the trace's nominal end
	// (Arrivals/Rate).
	ReconnectJitter time.Duration
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Seed == 0 {
		c.Seed = defaultSeed
	}
	def(&c.Edges, defaultEdges)
	def(&c.Ingests, defaultIngests)
	def(&c.BaseCapacity, defaultBaseCapacity)
	def(&c.Allocators, defaultAllocators)
	def(&c.Arrivals, defaultArrivals)
	if c.Rate == 0 {
		c.Rate = defaultRate
	}
	for _, d := range []struct {
		v *time.Duration
		d time.Duration
	}{{&c.MeanSession, defaultMeanSession}, {&c.Report, defaultReport}, {&c.Sync, defaultSync}, {&c.Sample, defaultSample}} {
		if *d.v == 0 {
			*d.v = d.d
		}
	}
	if c.Edges < 2 || c.Ingests < 1 || c.BaseCapacity < 2 || c.Allocators < 1 || c.Allocators > 256 || c.Arrivals < 1 {
		return c, errors.New("gslbsim: need Edges >= 2, Ingests >= 1, BaseCapacity >= 2, 1 <= Allocators <= 256, Arrivals >= 1")
	}
	// Edge indexes are kept as int16 per viewer, viewer indexes as int32
	// in events.
	if c.Edges > math.MaxInt16 || c.Arrivals > math.MaxInt32 {
		return c, errors.New("gslbsim: at most 32767 edges and 2^31-1 arrivals")
	}
	if c.Rate < 0 || c.MeanSession < 0 || c.Report < 0 || c.Sync < 0 || c.Sample < 0 || c.WarmUp < 0 || c.ReconnectJitter < 0 {
		return c, errors.New("gslbsim: rates and durations must not be negative")
	}
	span := time.Duration(float64(c.Arrivals) / c.Rate * float64(time.Second))
	if c.WarmUp == 0 {
		c.WarmUp = span / 10
	}
	if c.KillAt == 0 {
		c.KillAt = span / 2
	}
	if c.ReconnectJitter == 0 && c.KillAt > 0 {
		c.ReconnectJitter = max(span-c.KillAt, time.Millisecond)
	}
	return c, nil
}
