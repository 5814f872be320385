package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/internal/breaker"
	"danmaku/internal/testwait"
)

var (
	errDown   = errors.New("connection refused")
	errAnswer = errors.New("not found")
)

func newBreaker(t *testing.T, cfg breaker.Config) *breaker.Breaker {
	t.Helper()
	if cfg.Dep == "" {
		cfg.Dep = "test"
	}
	if cfg.Target == "" {
		cfg.Target = t.Name()
	}
	if cfg.IsFailure == nil {
		cfg.IsFailure = func(err error) bool { return !errors.Is(err, errAnswer) }
	}
	b, err := breaker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitState waits until b reads want. The tests that wait for an open
// period to pass run in a synctest bubble, where gobreaker's clock
// (time.Now) is the bubble's: the sleeps below advance it, and no
// scheduling delay of a loaded machine can let an open period pass between
// two of the test's own steps.
func waitState(t *testing.T, b *breaker.Breaker, want breaker.State) {
	t.Helper()
	for deadline := time.Now().Add(testwait.Limit); b.State() != want; { // a guard against a hung wait, not a measurement
		if time.Now().After(deadline) {
			t.Fatalf("breaker stays %v, want %v", b.State(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b := newBreaker(t, breaker.Config{Failures: 3, OpenFor: time.Hour})
	fail := func() error { return errDown }
	for i := range 2 {
		if err := b.Do(fail); !errors.Is(err, errDown) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// A success in between starts the count again.
	if err := b.Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_ = b.Do(fail)
	}
	if got := b.State(); got != breaker.Closed {
		t.Fatalf("after 2 consecutive failures: %v, want closed", got)
	}
	_ = b.Do(fail)
	if got := b.State(); got != breaker.Open {
		t.Fatalf("after 3 consecutive failures: %v, want open", got)
	}
	called := false
	err := b.Do(func() error { called = true; return nil })
	if !errors.Is(err, breaker.ErrOpen) || called {
		t.Fatalf("open breaker: err %v, called %v; want ErrOpen without a call", err, called)
	}
	if !strings.Contains(err.Error(), "test "+t.Name()) {
		t.Errorf("error %q does not name the dependency and target", err)
	}
}

func TestBreakerCounts(t *testing.T) {
	cases := []struct {
		name string
		call func() error
		slow time.Duration // the call's duration
		open bool
	}{
		{"failure", func() error { return errDown }, 0, true},
		{"answer", func() error { return fmt.Errorf("get: %w", errAnswer) }, 0, false},
		{"cancelled", func() error { return fmt.Errorf("get: %w", context.Canceled) }, 0, false},
		{"deadline", func() error { return fmt.Errorf("get: %w", context.DeadlineExceeded) }, 0, true},
		{"slow success", func() error { return nil }, 20 * time.Millisecond, true},
		{"fast success", func() error { return nil }, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBreaker(t, breaker.Config{Failures: 2, SlowCall: 10 * time.Millisecond, OpenFor: time.Hour})
			for range 3 {
				done, err := b.Allow()
				if err != nil {
					break
				}
				done(c.call(), c.slow)
			}
			if got := b.State() == breaker.Open; got != c.open {
				t.Fatalf("open = %v, want %v", got, c.open)
			}
		})
	}
}

func TestBreakerProbesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, breaker.Config{Failures: 1, OpenFor: 20 * time.Millisecond, Probes: 2})
		_ = b.Do(func() error { return errDown })
		if b.State() != breaker.Open {
			t.Fatal("not open after its failure")
		}
		waitState(t, b, breaker.HalfOpen)

		// Half-open: Probes calls go through, the rest fail fast.
		done1, err1 := b.Allow()
		done2, err2 := b.Allow()
		_, err3 := b.Allow()
		if err1 != nil || err2 != nil || !errors.Is(err3, breaker.ErrOpen) {
			t.Fatalf("half-open admits %v %v %v; want two probes, then ErrOpen", err1, err2, err3)
		}
		// A failed probe opens it again.
		done1(errDown, 0)
		done2(nil, 0)
		if b.State() != breaker.Open {
			t.Fatalf("after a failed probe: %v, want open", b.State())
		}
		waitState(t, b, breaker.HalfOpen)
		for i := range 2 {
			if err := b.Do(func() error { return nil }); err != nil {
				t.Fatalf("probe %d: %v", i, err)
			}
		}
		if b.State() != breaker.Closed {
			t.Fatalf("after two good probes: %v, want closed", b.State())
		}
	})
}

func TestBreakerCancelledProbeFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, breaker.Config{Failures: 1, OpenFor: 10 * time.Millisecond})
		_ = b.Do(func() error { return errDown })
		waitState(t, b, breaker.HalfOpen)
		_ = b.Do(func() error { return context.Canceled })
		if err := b.Do(func() error { return nil }); err != nil {
			t.Fatalf("the probe after a cancelled one: %v", err)
		}
		if b.State() != breaker.Closed {
			t.Fatalf("%v, want closed", b.State())
		}
	})
}

func TestForSharesOneBreakerPerTarget(t *testing.T) {
	cfg := breaker.Config{Dep: "test", Target: t.Name(), Failures: 1, OpenFor: time.Hour}
	a, err := breaker.For(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := breaker.For(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("two breakers for one target")
	}
	cfg.Target += "-other"
	if c, _ := breaker.For(cfg); c == a {
		t.Fatal("one breaker for two targets")
	}
}

func TestConfig(t *testing.T) {
	for _, cfg := range []breaker.Config{
		{Target: "x"},
		{Dep: "x"},
		{Dep: "x", Target: "x", Failures: -1},
		{Dep: "x", Target: "x", OpenFor: -time.Second},
	} {
		if _, err := breaker.New(cfg); !errors.Is(err, breaker.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(breaker.Collectors()...)
		cfg := breaker.Config{Dep: "metrics-test", Target: "t1", Failures: 1, OpenFor: 10 * time.Millisecond}
		b, err := breaker.For(cfg)
		if err != nil {
			t.Fatal(err)
		}
		state := func() float64 {
			t.Helper()
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() != "danmaku_breaker_state" {
					continue
				}
				for _, m := range mf.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					if labels["dep"] == "metrics-test" && labels["target"] == "t1" {
						return m.GetGauge().GetValue()
					}
				}
			}
			t.Fatal("no state series")
			return 0
		}
		if got := state(); got != 0 {
			t.Fatalf("state %v, want 0 (closed)", got)
		}
		_ = b.Do(func() error { return errDown })
		if got := state(); got != 2 {
			t.Fatalf("state %v, want 2 (open)", got)
		}
		// Read at scrape time: the open period passes without a call
		// (the bubble's clock: exactly 20 ms).
		time.Sleep(20 * time.Millisecond)
		if got := state(); got != 1 {
			t.Fatalf("state %v, want 1 (half-open)", got)
		}
		_ = b.Do(func() error { return nil })
		if got := state(); got != 0 {
			t.Fatalf("state %v, want 0 (closed)", got)
		}
		n, err := testutil.GatherAndCount(reg, "danmaku_breaker_transitions_total")
		if err != nil || n == 0 {
			t.Fatalf("transitions: %d series, %v", n, err)
		}
	})
}

// TestBreakerSlowProbeCloses: a probe is judged by its answer, not its
// duration — the first call after an outage often carries what piled up.
func TestBreakerSlowProbeCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, breaker.Config{Failures: 1, SlowCall: time.Millisecond, OpenFor: 10 * time.Millisecond})
		_ = b.Do(func() error { return errDown })
		waitState(t, b, breaker.HalfOpen)
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		done(nil, time.Second)
		if got := b.State(); got != breaker.Closed {
			t.Fatalf("after a slow good probe: %v, want closed", got)
		}
	})
}
