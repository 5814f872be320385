//go:build faultclock

package clock

import (
	"fmt"
	"os"
	"time"
)

// FaultOffsetEnv is the variable a faultclock build reads at start: a Go
// duration ("2s", "-2s") added to every reading of Real, so that the fault
// table (internal/faults) runs one node with its clock ahead or behind.
// Go ignores libfaketime (it reads the clock through the vDSO, not libc),
// so the skew has to be in the binary; the tag keeps it out of every
// production build (offset_real.go is compiled instead).
const FaultOffsetEnv = "DANMAKU_FAULT_CLOCK_OFFSET"

// faultOffset is fixed at start: a constant offset keeps every interval
// between two readings exact (both carry it, monotonic reading included),
// as on a host whose clock is off.
var faultOffset = mustFaultOffset(os.Getenv(FaultOffsetEnv))

func mustFaultOffset(v string) time.Duration {
	d, err := ParseFaultOffset(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", FaultOffsetEnv, err)
		os.Exit(2)
	}
	if d != 0 {
		fmt.Fprintf(os.Stderr, "faultclock: this process's clock is %v off (%s)\n", d, FaultOffsetEnv)
	}
	return d
}

// ParseFaultOffset reads the offset: empty is none; otherwise a Go
// duration within a day either way.
func ParseFaultOffset(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a Go duration such as 2s or -2s: %w", err)
	}
	if d < -24*time.Hour || d > 24*time.Hour {
		return 0, fmt.Errorf("%v: want within a day either way", d)
	}
	return d, nil
}

// now is the system clock plus the fault offset.
func now() time.Time { return time.Now().Add(faultOffset) }

// FaultOffset is the offset this process's Real clock runs at.
func FaultOffset() time.Duration { return faultOffset }
