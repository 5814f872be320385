package clock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var epoch = time.Unix(1_700_000_000, 0)

// recv returns what ch holds, without waiting.
func recv(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

// scenario drives timers, tickers and AfterFuncs on c, moving time with
// advance, and returns what it saw: every value received (as an offset
// from the start), every AfterFunc run (with the time it read), every Stop
// and Reset result. Run on Real in a synctest bubble and on a Fake, the two
// logs must be the same.
func scenario(c Timers, advance func(time.Duration)) []string {
	start := c.Now()
	var (
		mu  sync.Mutex
		log []string
	)
	logf := func(format string, a ...any) {
		mu.Lock()
		log = append(log, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	at := func() time.Duration { return c.Now().Sub(start) }
	chans := map[string]<-chan time.Time{}
	poll := func() {
		for _, name := range []string{"A", "B", "C", "K"} {
			if v, ok := recv(chans[name]); ok {
				logf("%v: %s received %v", at(), name, v.Sub(start))
			}
		}
	}
	step := func(d time.Duration) { advance(d); poll() }

	tA, chA := c.NewTimer(30 * time.Millisecond)
	tB, chB := c.NewTimer(10 * time.Millisecond)
	tk, chK := c.NewTicker(25 * time.Millisecond)
	tC, chC := c.NewTimer(5 * time.Millisecond)
	chans["A"], chans["B"], chans["C"], chans["K"] = chA, chB, chC, chK
	c.AfterFunc(15*time.Millisecond, func() { logf("af1 ran at %v", at()) })
	af2 := c.AfterFunc(40*time.Millisecond, func() { logf("af2 ran at %v", at()) })

	advance(7 * time.Millisecond) // C fired, not received
	logf("7ms: C.Stop %v (fired, unreceived)", tC.Stop())
	step(5 * time.Millisecond)                                    // 12: B; C's value is gone
	logf("12ms: A.Reset(40ms) %v", tA.Reset(40*time.Millisecond)) // A at 52
	logf("12ms: af2.Reset(50ms) %v", af2.Reset(50*time.Millisecond))
	step(20 * time.Millisecond)    // 32: K at 25
	step(60 * time.Millisecond)    // 92: K once (50; 75 dropped), A at 52, af2 at 62
	tk.Reset(7 * time.Millisecond) // ticks at 99, 106, ...
	c.AfterFunc(3*time.Millisecond, func() { logf("af3 ran at %v", at()) })
	step(time.Millisecond)
	logf("93ms: A.Stop %v, B.Stop %v (fired, received)", tA.Stop(), tB.Stop())
	logf("93ms: A.Reset(0) %v", tA.Reset(0))
	poll()                      // A fires at once
	step(20 * time.Millisecond) // 113: K once (99; 106, 113 dropped)
	step(7 * time.Millisecond)  // 120: K at 120
	tk.Stop()
	step(30 * time.Millisecond) // nothing
	logf("150ms: C.Reset(10ms) %v", tC.Reset(10*time.Millisecond))
	step(10 * time.Millisecond) // C at 160
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(log)
}

// The Fake's semantics are package time's: the same scenario on both,
// time's run in a synctest bubble (whose clock is exact and moves only
// when every goroutine in it waits), gives the same log.
func TestFakeMatchesTime(t *testing.T) {
	var real []string
	synctest.Test(t, func(t *testing.T) {
		real = scenario(Real{}, func(d time.Duration) {
			time.Sleep(d)
			synctest.Wait() // the AfterFuncs due have run
		})
	})
	f := NewFake(epoch)
	fake := scenario(f, f.Advance)
	if !slices.Equal(real, fake) {
		t.Fatalf("Fake differs from package time:\ntime: %q\nfake: %q", real, fake)
	}
	for _, want := range []string{
		"12ms: B received 10ms",
		"32ms: K received 25ms",
		"92ms: K received 50ms",
		"92ms: A received 52ms",
		"af2 ran at 62ms",
		"af3 ran at 95ms",
		"113ms: K received 99ms",
		"160ms: C received 160ms",
	} {
		if !slices.Contains(fake, want) {
			t.Errorf("log lacks %q: %q", want, fake)
		}
	}
}

func TestFakeFiresInDeadlineOrder(t *testing.T) {
	f := NewFake(epoch)
	var got []string
	for i, d := range []time.Duration{30, 10, 20, 10} {
		f.AfterFunc(d*time.Millisecond, func() {
			got = append(got, fmt.Sprintf("%d@%d now=%v", d, i, f.Now().Sub(epoch)))
		})
	}
	f.Advance(time.Second)
	want := []string{"10@1 now=10ms", "10@3 now=10ms", "20@2 now=20ms", "30@0 now=30ms"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if n := f.Now().Sub(epoch); n != time.Second {
		t.Fatalf("Now after Advance = %v", n)
	}
}

func TestFakeTickerDropsTicks(t *testing.T) {
	f := NewFake(epoch)
	tk, ch := f.NewTicker(time.Second)
	defer tk.Stop()
	f.Advance(10 * time.Second)
	if v, ok := recv(ch); !ok || v.Sub(epoch) != time.Second {
		t.Fatalf("first tick %v %v, want 1s", v.Sub(epoch), ok)
	}
	if _, ok := recv(ch); ok {
		t.Fatal("a ticker fired twice in one Advance")
	}
	if next, _ := f.Next(); next.Sub(epoch) != 11*time.Second {
		t.Fatalf("next tick at %v, want 11s", next.Sub(epoch))
	}
	// One tick per step when the reader keeps up.
	for i := range 3 {
		f.Advance(time.Second)
		if v, ok := recv(ch); !ok || v.Sub(epoch) != time.Duration(11+i)*time.Second {
			t.Fatalf("step %d: %v %v", i, v.Sub(epoch), ok)
		}
	}
	// A reader that does not read keeps the oldest tick.
	f.Advance(time.Second)
	f.Advance(time.Second)
	if v, _ := recv(ch); v.Sub(epoch) != 14*time.Second {
		t.Fatalf("unread ticker holds %v, want the 14s tick", v.Sub(epoch))
	}
}

func TestFakeSetBackFiresNothing(t *testing.T) {
	f := NewFake(epoch)
	_, ch := f.NewTimer(time.Second)
	f.Set(epoch.Add(-time.Hour))
	if _, ok := recv(ch); ok {
		t.Fatal("fired going back")
	}
	f.Set(epoch.Add(time.Second))
	if v, ok := recv(ch); !ok || !v.Equal(epoch.Add(time.Second)) {
		t.Fatalf("Set past the deadline: %v %v", v, ok)
	}
}

func TestFakeAfterFuncChains(t *testing.T) {
	f := NewFake(epoch)
	var runs []time.Duration
	var tm Timer
	tm = f.AfterFunc(time.Second, func() {
		runs = append(runs, f.Now().Sub(epoch))
		if len(runs) < 5 {
			tm.Reset(time.Second)
		}
	})
	f.Advance(3500 * time.Millisecond)
	if !slices.Equal(runs, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}) {
		t.Fatalf("runs %v", runs)
	}
	if f.Armed() != 1 {
		t.Fatalf("Armed %d, want the rearmed AfterFunc", f.Armed())
	}
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop of an armed AfterFunc must report true once")
	}
}

func TestFakeZeroDurations(t *testing.T) {
	f := NewFake(epoch)
	if _, ch := f.NewTimer(0); !isReady(ch) {
		t.Fatal("NewTimer(0) did not fire at once")
	}
	done := make(chan struct{})
	f.AfterFunc(-time.Second, func() { close(done) })
	<-done // runs in its own goroutine, without Advance
	if f.Armed() != 0 {
		t.Fatalf("Armed %d", f.Armed())
	}
}

func isReady(ch <-chan time.Time) bool { _, ok := recv(ch); return ok }

func TestFakeBlockUntil(t *testing.T) {
	f := NewFake(epoch)
	got := make(chan error, 1)
	go func() { got <- Sleep(context.Background(), f, time.Minute) }()
	if err := f.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.BlockUntil(ctx, 5); err == nil {
		t.Fatal("BlockUntil of a cancelled context returned nil")
	}
	if err := Sleep(ctx, f, time.Minute); err == nil || f.Armed() != 0 {
		t.Fatalf("Sleep of a cancelled context: %v, %d armed", err, f.Armed())
	}
}

// Many goroutines make, reset and stop timers while others move the clock:
// run with -race.
func TestFakeConcurrent(t *testing.T) {
	f := NewFake(epoch)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 8 {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				d := time.Duration(i+j%5) * time.Millisecond
				tm, ch := f.NewTimer(d)
				tk, tch := f.NewTicker(d + time.Millisecond)
				af := f.AfterFunc(d, func() { _ = f.Now() })
				recv(ch)
				recv(tch)
				tm.Reset(d)
				tk.Reset(d + 2*time.Millisecond)
				tm.Stop()
				tk.Stop()
				af.Stop()
			}
		})
	}
	var movers sync.WaitGroup
	for range 2 {
		movers.Go(func() {
			for range 1000 {
				f.Advance(time.Millisecond)
			}
		})
	}
	movers.Go(func() {
		for range 200 {
			now := f.Now()
			f.Set(now.Add(3 * time.Millisecond)) // may go back: another mover stepped
		}
	})
	movers.Wait()
	close(stop)
	wg.Wait()
	if n := f.Armed(); n != 0 {
		t.Fatalf("%d left armed after every Stop", n)
	}
}

func TestTimersOf(t *testing.T) {
	f := NewFake(epoch)
	if TimersOf(f) != Timers(f) {
		t.Fatal("TimersOf(Fake) is not the Fake")
	}
	if _, ok := TimersOf(nil).(Real); !ok {
		t.Fatal("TimersOf(nil) is not Real")
	}
	if _, ok := TimersOf(NewFollower(f, nil, 0)).(Real); !ok {
		t.Fatal("TimersOf(a Now-only clock) is not Real")
	}
}

func TestRealTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Timers = Real{}
		start := time.Now()
		if err := Sleep(t.Context(), c, time.Second); err != nil || time.Since(start) != time.Second {
			t.Fatalf("Sleep: %v after %v", err, time.Since(start))
		}
		ran := make(chan struct{})
		c.AfterFunc(time.Second, func() { close(ran) })
		tk, ch := c.NewTicker(time.Second)
		defer tk.Stop()
		<-ch
		<-ran
	})
}
