package breakertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"danmaku/internal/breaker"
)

// Timeline records the calls of an outage test — when each started, how
// long it took, how it ended — around the outage's start (Cut) and end
// (Restored), and sums up the figures docs/reliability.md reports. Safe
// for concurrent use.
type Timeline struct {
	mu               sync.Mutex
	cut, restored    time.Time
	firstOpen        time.Time // first call refused by an open breaker
	firstOK          time.Time // first success that started after Restored
	longest          time.Duration
	longestDuring    time.Duration // of calls that started during the outage
	calls, ok, fails int
	refused          int
}

// Cut marks the outage's start.
func (tl *Timeline) Cut() { tl.mu.Lock(); tl.cut = time.Now(); tl.mu.Unlock() }

// Restored marks its end.
func (tl *Timeline) Restored() { tl.mu.Lock(); tl.restored = time.Now(); tl.mu.Unlock() }

// Record adds one call that started at start and ended now with err.
func (tl *Timeline) Record(start time.Time, err error) {
	end := time.Now()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d := end.Sub(start)
	tl.calls++
	tl.longest = max(tl.longest, d)
	during := !tl.cut.IsZero() && !start.Before(tl.cut) && (tl.restored.IsZero() || start.Before(tl.restored))
	if during {
		tl.longestDuring = max(tl.longestDuring, d)
	}
	switch {
	case err == nil:
		tl.ok++
		if !tl.restored.IsZero() && !start.Before(tl.restored) && tl.firstOK.IsZero() {
			tl.firstOK = end
		}
	case errors.Is(err, breaker.ErrOpen):
		tl.refused++
		if !tl.cut.IsZero() && tl.firstOpen.IsZero() {
			tl.firstOpen = end
		}
	default:
		tl.fails++
	}
}

// Figures are a Timeline's sums.
type Figures struct {
	// OpenAfter is from the cut to the first call an open breaker refused
	// (0: none was).
	OpenAfter time.Duration
	// ClosedAfter is from the restore to the end of the first call that
	// succeeded after it (0: none did).
	ClosedAfter time.Duration
	// Longest is the longest call that started during the outage.
	Longest time.Duration
	// Calls, OK, Failed and Refused count the calls by outcome.
	Calls, OK, Failed, Refused int
}

// Figures sums tl up.
func (tl *Timeline) Figures() Figures {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	f := Figures{Longest: tl.longestDuring, Calls: tl.calls, OK: tl.ok, Failed: tl.fails, Refused: tl.refused}
	if !tl.firstOpen.IsZero() {
		f.OpenAfter = tl.firstOpen.Sub(tl.cut)
	}
	if !tl.firstOK.IsZero() {
		f.ClosedAfter = tl.firstOK.Sub(tl.restored)
	}
	return f
}

func (f Figures) String() string {
	return fmt.Sprintf("open after %v, closed %v after recovery, longest call during the outage %v (%d calls: %d ok, %d failed, %d refused by the breaker)",
		f.OpenAfter.Round(time.Millisecond), f.ClosedAfter.Round(time.Millisecond), f.Longest.Round(time.Millisecond), f.Calls, f.OK, f.Failed, f.Refused)
}

// EndedByDeadline reports whether err is a timeout: a call's context
// deadline, or an I/O deadline (an error with Timeout() true). The outage
// tests show by it that hung calls were ended by their deadline, rather
// than timing the calls (a starved test process adds its own delay).
func EndedByDeadline(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
