package sdk

import (
	"testing"
	"time"
)

// newTestReconnector returns a reconnector on a fake server clock whose
// jitter is always the largest value it may take (n-1), so every wait is
// exact.
func newTestReconnector() (*reconnector, *FakeClock) {
	clk := NewFakeClock(time.Unix(1_700_000_000, 0))
	return &reconnector{
		now:          clk.Now,
		jitter:       func(n time.Duration) time.Duration { return n - 1 },
		seenWindow:   time.Minute,
		rejoinJitter: 3 * time.Second,
	}, clk
}

func TestReconnectorDialFailures(t *testing.T) {
	r, _ := newTestReconnector()
	addrs := []string{"a", "b", "c"}
	// Each round tries every address, then backs off 1, 2, 4, ... s, capped at
	// 30 s: a wait of backoff/2 plus up to backoff/2 of jitter.
	for round, backoff := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		backoff *= time.Second
		for i, want := range addrs {
			if addr, _ := r.target(addrs); addr != want {
				t.Fatalf("round %d: dial %d went to %q, want %q", round, i, addr, want)
			}
			step := r.dialFailed(len(addrs), 0)
			if i < len(addrs)-1 {
				if step != (edgeStep{}) {
					t.Fatalf("round %d: after %q: %+v, want the next address at once", round, want, step)
				}
				continue
			}
			if want := (edgeStep{wait: backoff, rejoin: rejoinDialed}); step != want {
				t.Fatalf("round %d: every address failed: %+v, want %+v", round, step, want)
			}
		}
	}
	// A connection resets the back-off; the first is no reconnection, the
	// next ones are.
	if r.connected() || !r.connected() {
		t.Fatal("connected: the first connection is not a reconnection, the second is")
	}
	var step edgeStep
	for range addrs {
		_, _ = r.target(addrs)
		step = r.dialFailed(len(addrs), 0)
	}
	if step.wait != time.Second {
		t.Fatalf("after a connection: %+v, want the back-off back at 1 s", step)
	}
}

// TestReconnectorRetryAfter: a busy edge's Retry-After holds even after the
// other addresses failed, spread over a second past it, and only once.
func TestReconnectorRetryAfter(t *testing.T) {
	r, _ := newTestReconnector()
	addrs := []string{"a", "b"}
	_, _ = r.target(addrs)
	r.dialFailed(len(addrs), 5*time.Second)
	_, _ = r.target(addrs)
	step := r.dialFailed(len(addrs), 2*time.Second)
	if want := (edgeStep{wait: 5*time.Second + time.Second - 1, rejoin: rejoinDialed}); step != want {
		t.Fatalf("%+v, want %+v", step, want)
	}
	_, _ = r.target(addrs)
	r.dialFailed(len(addrs), 0)
	_, _ = r.target(addrs)
	if step := r.dialFailed(len(addrs), 0); step.wait != 2*time.Second {
		t.Fatalf("the next round: %+v, want the back-off alone (2 s)", step)
	}
}

func TestReconnectorTokenRefused(t *testing.T) {
	r, _ := newTestReconnector()
	addrs := []string{"a", "b"}
	_, _ = r.target(addrs)
	r.dialFailed(len(addrs), 0)
	if step := r.tokenRefused(); step != (edgeStep{rejoin: rejoinDialed}) {
		t.Fatalf("%+v", step)
	}
	if addr, _ := r.target(addrs); addr != "a" {
		t.Fatalf("after a refused token the next dial goes to %q, want the first address", addr)
	}
}

func TestReconnectorCloses(t *testing.T) {
	for _, tt := range []struct {
		name       string
		code       int
		progressed bool
		want       edgeStep
		keepLast   bool
		firstAddr  bool
	}{
		{"room ended", CloseRoomEnded, true, edgeStep{stop: true}, true, false},
		{"banned", CloseBanned, false, edgeStep{stop: true}, true, false},
		{"resume after frames", CloseResume, true, edgeStep{}, true, false},
		{"resume before any frame", CloseResume, false, edgeStep{wait: time.Second}, true, false},
		{"resume gap", CloseResumeGap, true, edgeStep{wait: 3*time.Second - 1}, false, false},
		{"draining", CloseDraining, true, edgeStep{rejoin: rejoinCurrent}, true, true},
		{"token rejected", CloseTokenRejected, false, edgeStep{rejoin: rejoinCurrent}, true, true},
		{"dropped", 0, true, edgeStep{wait: 3*time.Second - 1}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newTestReconnector()
			addrs := []string{"a", "b"}
			_, _ = r.target(addrs)
			r.dialFailed(len(addrs), 0) // on to "b"
			r.connected()
			r.last = "5-0"
			if step := r.closed(tt.code, tt.progressed); step != tt.want {
				t.Fatalf("closed(%d) = %+v, want %+v", tt.code, step, tt.want)
			}
			addr, last := r.target(addrs)
			if (last == "5-0") != tt.keepLast {
				t.Errorf("resumes from %q; keep the last id: %v", last, tt.keepLast)
			}
			if (addr == "a") != tt.firstAddr {
				t.Errorf("the next dial goes to %q; back to the first address: %v", addr, tt.firstAddr)
			}
		})
	}
}

// TestReconnectorStuckResume: resume closes before any frame back off 1, 2,
// 4 s ... up to 30 s; one with frames resets it.
func TestReconnectorStuckResume(t *testing.T) {
	r, _ := newTestReconnector()
	for _, backoff := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		if step := r.closed(CloseResume, false); step.wait != backoff*time.Second {
			t.Fatalf("%+v, want a wait of %v", step, backoff*time.Second)
		}
	}
	r.closed(CloseResume, true)
	if step := r.closed(CloseResume, false); step.wait != time.Second {
		t.Fatalf("after frames: %+v, want the back-off back at 1 s", step)
	}
}

// TestReconnectorNoJitter: with RejoinJitter zero, a drop reconnects at once.
func TestReconnectorNoJitter(t *testing.T) {
	r, _ := newTestReconnector()
	r.rejoinJitter = 0
	r.jitter = func(time.Duration) time.Duration { t.Fatal("jitter drawn"); return 0 }
	for _, code := range []int{0, CloseResumeGap} {
		if step := r.closed(code, true); step != (edgeStep{}) {
			t.Fatalf("closed(%d) = %+v, want a reconnect at once", code, step)
		}
	}
}

// TestReconnectorStaleResume: the resume point is dropped once older than
// half the seen window, counted from when its connection ended.
func TestReconnectorStaleResume(t *testing.T) {
	r, clk := newTestReconnector()
	addrs := []string{"a"}
	if _, last := r.target(addrs); last != "" {
		t.Fatalf("resumes from %q before any connection", last)
	}
	r.last = "7-0"
	r.closed(0, true)
	clk.Advance(r.seenWindow / 2)
	if _, last := r.target(addrs); last != "7-0" {
		t.Fatalf("at half the seen window: resumes from %q, want 7-0", last)
	}
	clk.Advance(time.Millisecond)
	if _, last := r.target(addrs); last != "" {
		t.Fatalf("past half the seen window: resumes from %q, want a fresh start", last)
	}
}
