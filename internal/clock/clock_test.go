package clock

import (
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
