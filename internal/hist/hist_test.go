package hist

import (
	"math"
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 10_000; i++ {
		h.Observe(time.Duration(i) * time.Microsecond * 100) // 0.1 ms .. 1 s
	}
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.9: 900 * time.Millisecond, 0.99: 990 * time.Millisecond} {
		got := h.Quantile(q)
		if math.Abs(float64(got-want)) > 0.032*float64(want) {
			t.Errorf("q%v = %v, want %v ± 3.2%%", q, got, want)
		}
	}
	if h.Max() != time.Second || h.Count() != 10_000 {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
	s := h.Summary()
	if s.Count != 10_000 || s.MaxMs != 1000 || math.Abs(s.MeanMs-500.05) > 0.01 {
		t.Errorf("summary %+v", s)
	}
	for us := int64(0); us < 1<<40; us = us*3/2 + 1 {
		if i := bucketOf(us); i < 0 || i >= numBuckets || math.Abs(float64(bucketMid(i)-us)) > float64(us)/32+1 {
			t.Fatalf("bucket of %d: %d, mid %d", us, i, bucketMid(i))
		}
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Summary() != (Summary{}) {
		t.Error("empty histogram")
	}
}

// TestHistogramMerge: two histograms' Data added into a third give the
// percentiles of all their observations.
func TestHistogramMerge(t *testing.T) {
	var a, b, all, merged Histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Millisecond
		if i%2 == 0 {
			a.Observe(d)
		} else {
			b.Observe(d)
		}
		all.Observe(d)
	}
	merged.Add(a.Data())
	merged.Add(b.Data())
	if merged.Summary() != all.Summary() {
		t.Errorf("merged %+v, want %+v", merged.Summary(), all.Summary())
	}
}

// TestQuantile: the exact quantile of samples uses the histogram's rank,
// keeps values below a microsecond and below zero.
func TestQuantile(t *testing.T) {
	if Quantile(nil, 0.5) != 0 {
		t.Error("no samples")
	}
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted: Quantile sorts
		s = append(s, time.Duration(i)*time.Nanosecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.01, 1}, {0.5, 50}, {0.501, 51}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := Quantile(s, c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Quantile([]time.Duration{-3 * time.Millisecond, time.Millisecond}, 0.5); got != -3*time.Millisecond {
		t.Errorf("negative samples: %v", got)
	}
	// The same rank as the histogram's, on values it holds exactly.
	var h Histogram
	var us []time.Duration
	for i := range 31 {
		d := time.Duration(i) * time.Microsecond
		h.Observe(d)
		us = append(us, d)
	}
	for _, q := range []float64{0.1, 0.5, 0.9, 1} {
		if h.Quantile(q) != Quantile(us, q) {
			t.Errorf("q%v: histogram %v, samples %v", q, h.Quantile(q), Quantile(us, q))
		}
	}
}
