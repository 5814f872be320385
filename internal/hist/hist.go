// Package hist is the one way latencies are summarised into percentiles:
// a lock-free log-linear Histogram (HDR-style, 3 % precision, mergeable
// across processes through Data) for what is observed while it runs, and
// Quantile for a slice of samples kept whole. Both use the same rank: the
// q-quantile is the smallest value with at least q of the observations at
// or below it (nearest rank).
//
// A Histogram is safe for concurrent use; Quantile sorts its argument.
package hist

import (
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"
)

// subBits is log2 of the linear sub-buckets per power of two: 32 of them
// bound a percentile's error to 1/32 (3 %) of its value, finer than the
// noise of any latency measured on a shared machine.
const (
	subBits    = 5
	subBuckets = 1 << subBits
	numBuckets = (64 - subBits + 1) * subBuckets
)

// Histogram records durations in microseconds into log-linear buckets
// (HDR-style). Observing is a few atomic adds and no lock, because several
// thousand workers a second record into the same histogram and a mutex
// there would be the generator's bottleneck. Percentiles are read while it
// is being written (the live progress line); such a read is not a snapshot
// but never off by more than the observations of that instant.
type Histogram struct {
	counts [numBuckets]atomic.Int64
	n      atomic.Int64
	sumUs  atomic.Int64
	maxUs  atomic.Int64
}

func bucketOf(us int64) int {
	if us < subBuckets {
		return int(max(us, 0))
	}
	shift := bits.Len64(uint64(us)) - subBits - 1
	return (shift+1)*subBuckets + int(us>>shift) - subBuckets
}

// bucketMid is a representative value of bucket i: the middle of its range,
// so that the error is at most half a bucket either way.
func bucketMid(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	shift := i/subBuckets - 1
	lo := int64(i%subBuckets+subBuckets) << shift
	return lo + (int64(1)<<shift)/2
}

// Observe records d.
func (h *Histogram) Observe(d time.Duration) {
	us := d.Microseconds()
	if us < 0 {
		us = 0
	}
	h.counts[bucketOf(us)].Add(1)
	h.n.Add(1)
	h.sumUs.Add(us)
	for {
		m := h.maxUs.Load()
		if us <= m || h.maxUs.CompareAndSwap(m, us) {
			return
		}
	}
}

// Count is the number of observations.
func (h *Histogram) Count() int64 { return h.n.Load() }

// Quantile returns the q-quantile (0 < q ≤ 1) of what was observed: the
// smallest recorded value with at least q of the observations at or below
// it, to the bucket's precision and never above the maximum.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen int64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(bucketMid(i), h.maxUs.Load())) * time.Microsecond
		}
	}
	return time.Duration(h.maxUs.Load()) * time.Microsecond
}

// Max is the largest observation.
func (h *Histogram) Max() time.Duration { return time.Duration(h.maxUs.Load()) * time.Microsecond }

// Summary is a latency distribution as reported, in milliseconds.
type Summary struct {
	Count  int64   `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Summary reads the histogram's percentiles.
func (h *Histogram) Summary() Summary {
	n := h.n.Load()
	if n == 0 {
		return Summary{}
	}
	return Summary{
		Count:  n,
		MeanMs: Ms(time.Duration(h.sumUs.Load()/n) * time.Microsecond),
		P50Ms:  Ms(h.Quantile(0.50)),
		P90Ms:  Ms(h.Quantile(0.90)),
		P99Ms:  Ms(h.Quantile(0.99)),
		MaxMs:  Ms(h.Max()),
	}
}

// Ms is d in milliseconds rounded to the microsecond: JSON readers get a
// plain number in the unit latency targets are written in.
func Ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

// Data is a Histogram as a JSON report carries it: the non-empty buckets
// by index, so that the reports of several processes merge into exact
// percentiles (Add) rather than averaged ones.
type Data struct {
	Buckets map[int]int64 `json:"buckets,omitempty"`
	SumUs   int64         `json:"sum_us"`
	MaxUs   int64         `json:"max_us"`
}

// Data returns what h holds.
func (h *Histogram) Data() Data {
	d := Data{SumUs: h.sumUs.Load(), MaxUs: h.maxUs.Load()}
	for i := range h.counts {
		if n := h.counts[i].Load(); n > 0 {
			if d.Buckets == nil {
				d.Buckets = map[int]int64{}
			}
			d.Buckets[i] = n
		}
	}
	return d
}

// Add adds what d holds to h. Buckets outside the histogram's range (a
// report of a different version) are counted in the last one.
func (h *Histogram) Add(d Data) {
	for i, n := range d.Buckets {
		if n <= 0 {
			continue
		}
		h.counts[min(max(i, 0), numBuckets-1)].Add(n)
		h.n.Add(n)
	}
	h.sumUs.Add(d.SumUs)
	for {
		m := h.maxUs.Load()
		if d.MaxUs <= m || h.maxUs.CompareAndSwap(m, d.MaxUs) {
			return
		}
	}
}

// Quantile returns the q-quantile (0 < q ≤ 1) of samples, exactly: the
// smallest sample with at least q of them at or below it, the rank rule of
// Histogram.Quantile. For samples kept whole — few, below a microsecond or
// negative, where the histogram's buckets would blur them. It sorts
// samples in place; none gives 0.
func Quantile(samples []time.Duration, q float64) time.Duration {
	n := len(samples)
	if n == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(math.Ceil(q * float64(n)))
	return samples[min(max(rank, 1), n)-1]
}
