package backoff

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// fixed always draws the same fraction of n: 0 gives the shortest wait,
// 1 the longest.
type fixed float64

func (f fixed) Int64N(n int64) int64 { return min(int64(float64(f)*float64(n)), n-1) }

func TestBound(t *testing.T) {
	p := Policy{Base: 50 * time.Millisecond, Max: time.Second}
	for _, c := range []struct {
		n    int
		want time.Duration
	}{
		{-1, 50 * time.Millisecond}, {0, 50 * time.Millisecond}, {1, 50 * time.Millisecond},
		{2, 100 * time.Millisecond}, {3, 200 * time.Millisecond}, {5, 800 * time.Millisecond},
		{6, time.Second}, {1000, time.Second},
	} {
		if got := p.Bound(c.n); got != c.want {
			t.Errorf("Bound(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	if got := (Policy{}).Bound(3); got != defaultBase {
		t.Errorf("zero policy: Bound(3) = %v, want %v (Max below Base is Base)", got, defaultBase)
	}
	if got := (Policy{Base: time.Second, Max: time.Millisecond}).Bound(4); got != time.Second {
		t.Errorf("Max below Base: %v", got)
	}
}

// TestDelayFullJitter: every wait lies in [0, Bound(n)], both ends reached.
func TestDelayFullJitter(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second}
	for n := 1; n <= 8; n++ {
		p.Rand = fixed(0)
		if got := p.Delay(n); got != 0 {
			t.Errorf("Delay(%d) low = %v, want 0", n, got)
		}
		p.Rand = fixed(1)
		if got := p.Delay(n); got != p.Bound(n) {
			t.Errorf("Delay(%d) high = %v, want %v", n, got, p.Bound(n))
		}
	}
}

// TestDelaySpread: loops that fail together do not retry together — the
// draws of a seeded source spread over the whole interval.
func TestDelaySpread(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Second, Rand: rand.New(rand.NewPCG(1, 2))}
	var quarters [4]int
	for range 4000 {
		d := p.Delay(1)
		if d < 0 || d > time.Second {
			t.Fatalf("Delay = %v, outside [0, 1s]", d)
		}
		quarters[min(3, int(d/(250*time.Millisecond)))]++
	}
	for i, q := range quarters {
		if q < 800 || q > 1200 {
			t.Errorf("quarter %d holds %d of 4000 draws, want about 1000: %v", i, q, quarters)
		}
	}
}

func TestBackoffNextReset(t *testing.T) {
	b := New(10*time.Millisecond, 40*time.Millisecond)
	b.Rand = fixed(1)
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if b.Failures() != 4 {
		t.Errorf("Failures = %d", b.Failures())
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond || b.Failures() != 1 {
		t.Errorf("after Reset: %v, %d failures", d, b.Failures())
	}
	var zero Backoff
	if d := zero.Next(); d < 0 || d > defaultBase {
		t.Errorf("zero Backoff: %v", d)
	}
}

// TestSleep: Sleep waits the whole duration, or returns false at once when
// its context ends first (fake time: no wall clock).
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(context.Background(), time.Second) || time.Since(start) != time.Second {
			t.Fatalf("Sleep(1s) returned after %v", time.Since(start))
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		start = time.Now()
		if Sleep(ctx, time.Hour) || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("Sleep with a context cancelled at 100 ms returned after %v", time.Since(start))
		}
	})
}
