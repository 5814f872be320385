//go:build faultclock

package clock

import (
	"testing"
	"time"
)

// go test -tags faultclock ./internal/clock: the offset's parsing, and
// Real carrying it (zero here: the test process sets no offset).
func TestParseFaultOffset(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true}, {"2s", 2 * time.Second, true}, {"-2s", -2 * time.Second, true},
		{"1500ms", 1500 * time.Millisecond, true}, {"2", 0, false}, {"ahead", 0, false}, {"25h", 0, false}, {"-25h", 0, false},
	} {
		got, err := ParseFaultOffset(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseFaultOffset(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	faultOffset = 2 * time.Second
	defer func() { faultOffset = 0 }()
	before := time.Now()
	got := (Real{}).Now()
	after := time.Now()
	if got.Before(before.Add(2*time.Second)) || got.After(after.Add(2*time.Second)) {
		t.Errorf("Real with a 2 s offset read %v between %v and %v", got, before, after)
	}
	if FaultOffset() != 2*time.Second {
		t.Errorf("FaultOffset() = %v", FaultOffset())
	}
}
