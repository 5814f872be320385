package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Traffic patterns of the comment senders.
const (
	// PatternSteady offers Config.Rate for the whole run.
	PatternSteady = "steady"
	// PatternPulse is a show's big moment: the comment rate climbs
	// linearly from 0 to Config.PulsePeak over Config.PulseRamp, holds the
	// peak for Config.PulseHold (zero: to the end of the run), then falls
	// back to Config.Rate for what is left of the run.
	PatternPulse = "pulse"
)

// ParseRate reads a rate: "1000", "1000/s", "2.5k/s", "600/m" or "10/h",
// in events per second. A rate is never negative.
func ParseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), "/")
	per := 1.0
	switch strings.TrimSpace(unit) {
	case "", "s":
	case "m", "min":
		per = 60
	case "h":
		per = 3600
	default:
		return 0, fmt.Errorf("rate %q: unit must be /s, /m or /h", s)
	}
	mult := 1.0
	num = strings.TrimSpace(num)
	if k, ok := strings.CutSuffix(num, "k"); ok {
		num, mult = k, 1000
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("rate %q: not a number of events per second, minute or hour", s)
	}
	return v * mult / per, nil
}

// FormatRate writes a rate the way ParseRate reads it.
func FormatRate(r float64) string {
	if r != 0 && r < 1 {
		return strconv.FormatFloat(r*60, 'g', 4, 64) + "/m"
	}
	return strconv.FormatFloat(r, 'g', 6, 64) + "/s"
}

// schedule is the offered rate over the run. The pacers issue, at elapsed
// time t, whatever cumulative(t) says is due: the load is open-loop (a slow
// answer does not slow the offer), which is what an audience does.
type schedule struct {
	pulse      bool
	base, peak float64       // events per second
	ramp, hold time.Duration // pulse only; hold < 0: no end
}

// rate is the offered rate at elapsed time t.
func (s schedule) rate(t time.Duration) float64 {
	if !s.pulse {
		return s.base
	}
	switch {
	case t < s.ramp:
		return s.peak * t.Seconds() / s.ramp.Seconds()
	case s.hold < 0 || t < s.ramp+s.hold:
		return s.peak
	}
	return s.base
}

// cumulative is how many events are due by elapsed time t: the integral of
// rate from 0 to t.
func (s schedule) cumulative(t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	if !s.pulse {
		return s.base * t.Seconds()
	}
	r := s.ramp.Seconds()
	if t < s.ramp {
		x := t.Seconds()
		return s.peak * x * x / (2 * r)
	}
	n := s.peak * r / 2
	if s.hold < 0 || t < s.ramp+s.hold {
		return n + s.peak*(t-s.ramp).Seconds()
	}
	return n + s.peak*s.hold.Seconds() + s.base*(t-s.ramp-s.hold).Seconds()
}

// timeOf is when the n-th event (n ≥ 1) is due: the smallest t with
// cumulative(t) ≥ n, the inverse of cumulative. The pacers stamp each event
// with it, and every latency is measured from it: an event the generator
// sends late (its workers busy, its process descheduled) still counts from
// when the audience wanted it sent, so a stall shows as latency instead of
// vanishing from the figures (coordinated omission). ok is false when the
// schedule never reaches n.
func (s schedule) timeOf(n float64) (time.Duration, bool) {
	if n <= 0 {
		return 0, true
	}
	sec := func(x float64) time.Duration { return time.Duration(math.Ceil(x * float64(time.Second))) }
	if !s.pulse {
		if s.base <= 0 {
			return 0, false
		}
		return sec(n / s.base), true
	}
	r := s.ramp.Seconds()
	rampN := s.peak * r / 2
	if n <= rampN {
		if s.peak <= 0 {
			return 0, false
		}
		return sec(math.Sqrt(2 * r * n / s.peak)), true
	}
	if s.hold < 0 || n <= rampN+s.peak*s.hold.Seconds() {
		if s.peak <= 0 {
			return 0, false
		}
		return s.ramp + sec((n-rampN)/s.peak), true
	}
	if s.base <= 0 {
		return 0, false
	}
	return s.ramp + s.hold + sec((n-rampN-s.peak*s.hold.Seconds())/s.base), true
}

func (s schedule) String() string {
	if !s.pulse {
		return "steady " + FormatRate(s.base)
	}
	hold := "to the end"
	if s.hold >= 0 {
		hold = "for " + s.hold.String() + ", then " + FormatRate(s.base)
	}
	return fmt.Sprintf("pulse 0 → %s over %v, held %s", FormatRate(s.peak), s.ramp, hold)
}
