package sysload

import (
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	busy, total, err := parseStat([]byte("cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 1 2 3 4\n"))
	if err != nil || total != 990 || busy != 170 {
		t.Fatalf("busy %d total %d err %v; want 170 of 990", busy, total, err)
	}
	for _, bad := range []string{"", "cpu", "intr 1 2 3 4 5", "cpu 1 2 x 4 5"} {
		if _, _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

// TestSampler: a busy loop shows as process CPU, values stay in 0..1, and
// answers between samples are the cached ones.
func TestSampler(t *testing.T) {
	s := New(20 * time.Millisecond)
	deadline := time.Now().Add(100 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	p, m := s.CPU()
	if p <= 0 || p > 1 || m < 0 || m > 1 {
		t.Fatalf("after a busy loop: process %v machine %v", p, m)
	}
	if p2, m2 := s.CPU(); p2 != p || m2 != m {
		t.Fatalf("within Every the answer changed: %v %v then %v %v", p, m, p2, m2)
	}
	if s.Max() < p {
		t.Fatal("Max below the process figure")
	}
	_ = x
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 800 20 3 2 10 7 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		busy, total, err := parseStat(b)
		if err == nil && busy > total {
			t.Fatalf("busy %d > total %d", busy, total)
		}
	})
}
