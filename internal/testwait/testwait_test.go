package testwait

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		if !Poll(t.Context(), func() bool { return calls.Add(1) == 3 }) || calls.Load() != 3 {
			t.Fatalf("Poll: %d calls, want true at the third", calls.Load())
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if Poll(ctx, func() bool { return false }) {
			t.Fatal("Poll held a condition that never holds")
		}
		if waited := time.Since(start); waited != time.Second { // the bubble's clock
			t.Errorf("gave up after %v, want at ctx's end (1s)", waited)
		}
	})
}

// TestFor: a condition that comes true ends the wait; For fails the test
// only when it never does.
func TestFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		go func() {
			time.Sleep(time.Second) // the bubble's clock
			n.Store(1)
		}()
		For(t, "n set", func() bool { return n.Load() == 1 })
	})
	ft := &fakeT{TB: t}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	Ctx(ft, ctx, "never", func() bool { return false })
	if ft.failed != "gave up waiting for never" {
		t.Errorf("Ctx on an ended context: failed %q", ft.failed)
	}
}

// fakeT records the failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }
