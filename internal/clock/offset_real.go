//go:build !faultclock

package clock

import "time"

// now is the system clock. Builds without the test-only tag faultclock
// have no way to shift it: offset_fault.go is not compiled in.
func now() time.Time { return time.Now() }

// FaultOffset is the clock offset of a faultclock build; here, always 0.
func FaultOffset() time.Duration { return 0 }
