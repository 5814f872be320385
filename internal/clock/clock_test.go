package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	start := time.Unix(100, 0)
	f := NewFake(start)
	if !f.Now().Equal(start) {
		t.Fatal("NewFake")
	}
	f.Advance(1500 * time.Millisecond)
	if got := f.Now().Sub(start); got != 1500*time.Millisecond {
		t.Fatalf("Advance: %v", got)
	}
	f.Set(start)
	if !f.Now().Equal(start) {
		t.Fatal("Set")
	}
	if _, ok := Or(nil).(Real); !ok {
		t.Fatal("Or(nil) is not Real")
	}
	if Or(f) != Clock(f) {
		t.Fatal("Or(f) != f")
	}
}

func TestFollower(t *testing.T) {
	local := NewFake(time.Unix(1700000000, 0))
	remoteOffset := -2 * time.Second
	calls := 0
	read := func(context.Context) (time.Time, error) {
		calls++
		// The first sample is slow (a 40 ms round trip), the others fast.
		if calls == 1 {
			local.Advance(20 * time.Millisecond)
			r := local.Now().Add(remoteOffset)
			local.Advance(20 * time.Millisecond)
			return r, nil
		}
		return local.Now().Add(remoteOffset), nil
	}
	f := NewFollower(local, read, 0)
	if _, _, ok := f.Offset(); ok || !f.Now().Equal(local.Now()) {
		t.Fatal("before a sample the follower must be the local clock")
	}
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	off, rtt, ok := f.Offset()
	if !ok || off != remoteOffset || rtt != 0 {
		t.Fatalf("Offset = %v, %v, %v; want %v from the fastest sample", off, rtt, ok, remoteOffset)
	}
	if got := f.Now(); !got.Equal(local.Now().Add(remoteOffset)) {
		t.Fatalf("Now = %v", got)
	}
	// A failing remote keeps the last offset.
	failing := NewFollower(local, func(context.Context) (time.Time, error) { return time.Time{}, errors.New("down") }, 0)
	if err := failing.Sync(context.Background()); err == nil {
		t.Fatal("Sync of a failing remote succeeded")
	}
}

// A production build (no faultclock tag) has no clock offset, whatever
// the environment says.
func TestRealHasNoFaultOffset(t *testing.T) {
	if FaultOffset() != 0 {
		t.Skip("built with -tags faultclock")
	}
	t.Setenv("DANMAKU_FAULT_CLOCK_OFFSET", "1h")
	if d := time.Until((Real{}).Now()); d > time.Minute || d < -time.Minute {
		t.Fatalf("Real is %v off the system clock", d)
	}
}
