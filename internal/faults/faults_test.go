package faults

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestReplaceBetween(t *testing.T) {
	begin, end := Marker("fault-table")
	doc := "intro\n" + begin + "\nold\n" + end + "\nafter\n"
	got, err := ReplaceBetween(doc, "fault-table", "new")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + begin + "\nnew\n" + end + "\nafter\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"no markers", end + "\n" + begin} {
		if _, err := ReplaceBetween(bad, "fault-table", "x"); !errors.Is(err, ErrNoMarkers) {
			t.Errorf("%q: err %v, want ErrNoMarkers", bad, err)
		}
	}
}

func TestRowPass(t *testing.T) {
	ok := Row{GiftsAccepted: 10, GiftsInSegments: 10, GiftsToAll: 10}
	for _, tc := range []struct {
		name string
		row  Row
		want bool
	}{
		{"exactly once", ok, true},
		{"lost pair", func() Row { r := ok; r.Lost = 1; return r }(), false},
		{"doubled pair", func() Row { r := ok; r.Doubled = 1; return r }(), false},
		{"doubled in segments", func() Row { r := ok; r.GiftsSegmentDoubled = 1; return r }(), false},
		{"missing from segments", func() Row { r := ok; r.GiftsInSegments = 9; return r }(), false},
		{"not to every viewer", func() Row { r := ok; r.GiftsToAll = 9; return r }(), false},
		{"incomplete", func() Row { r := ok; r.Incomplete = true; return r }(), false},
	} {
		if got := tc.row.Pass(); got != tc.want {
			t.Errorf("%s: Pass() = %v, want %v", tc.name, got, tc.want)
		}
	}
	md := Markdown([]Row{ok, {Fault: "x", Lost: 1}})
	if strings.Count(md, "\n") != 4 || !strings.Contains(md, "**FAIL**") {
		t.Errorf("markdown:\n%s", md)
	}
}

// echoServer answers every connection by echoing it back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	// A bound on a held connection: the proxy under Cut passes nothing.
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	_, err = io.ReadFull(c, b)
	return err
}

func TestProxyCutRestoreAndFailover(t *testing.T) {
	dead := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := ln.Addr().String()
		ln.Close()
		return a
	}()
	p, err := NewProxy(dead, echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 3 { // a refusing backend is skipped, whichever comes first
		if err := roundTrip(p.Addr()); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
	}
	p.Cut()
	if err := roundTrip(p.Addr()); err == nil {
		t.Fatal("a round trip passed a cut proxy")
	}
	p.Restore()
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestFitAndFlat(t *testing.T) {
	ts := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	noisy := []float64{100, 101, 99, 100, 102, 98, 100, 101}
	leak := []float64{100, 110, 120, 130, 140, 150, 160, 170}
	slow := []float64{100, 100.1, 100.2, 100.3, 100.4, 100.5, 100.6, 100.7}
	for _, tc := range []struct {
		name string
		ys   []float64
		want bool
	}{
		{"noise", noisy, true},
		{"leak", leak, false},
		{"slow trend", slow, true}, // +24 % over a 4-hour show
	} {
		f := Fit(ts, tc.ys)
		if ok, why := f.Flat(); ok != tc.want {
			t.Errorf("%s: Flat() = %v (%s), fit %+v", tc.name, ok, why, f)
		}
	}
	if f := Fit(ts, leak); f.PerMin < 9.99 || f.PerMin > 10.01 || f.StdErr > 1e-9 {
		t.Errorf("leak fit %+v, want slope 10 and no error", f)
	}
	if ok, _ := Fit(ts[:2], leak[:2]).Flat(); ok {
		t.Error("two points passed")
	}
}

func TestFlatOfAndNoNewHigh(t *testing.T) {
	ts := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	// A part of a process, -4 MiB and rising 0.1 a minute: +24 MiB over a
	// show, six times its own size but under half of a 60 MiB process.
	part := []float64{-4, -3.9, -3.8, -3.7, -3.6, -3.5, -3.4, -3.3}
	f := Fit(ts, part)
	if ok, why := f.Flat(); ok {
		t.Errorf("Flat() of the part alone passed: %s", why)
	}
	if ok, why := f.FlatOf(60); !ok {
		t.Errorf("FlatOf(60) = false (%s)", why)
	}
	if ok, _ := f.FlatOf(40); ok {
		t.Error("FlatOf(40) passed +24 over a level of 40")
	}
	for _, tc := range []struct {
		name   string
		ys     []float64
		fitted int
		want   bool
	}{
		{"joins, then connections up and down under them", []float64{90, 60, 40, 52, 54, 53, 50, 53, 54, 52}, 9, true},
		{"a step that holds", []float64{40, 40, 52, 54, 53, 50, 53, 54, 52}, 9, true},
		{"a burst that ends", []float64{20, 20, 220, 20, 20, 20, 21, 20, 20}, 9, true},
		{"a leak of one a minute", []float64{19, 20, 21, 22, 23, 24, 25, 26, 27}, 9, false},
		{"a leak past the joins' high", []float64{40, 30, 31, 33, 35, 37, 39, 41, 43}, 6, false},
		{"a step in the last third", []float64{19, 19, 19, 19, 19, 19, 19, 20, 20}, 9, false},
		{"too few fitted", []float64{1, 1, 1, 1, 1, 1}, 5, false},
	} {
		if got := NoNewHigh(tc.ys, tc.fitted); got != tc.want {
			t.Errorf("%s: NoNewHigh = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFitWidensForCorrelatedResiduals(t *testing.T) {
	ts := make([]float64, 36)
	step, scatter := make([]float64, 36), make([]float64, 36)
	for i := range ts {
		ts[i] = float64(i) / 6
		if i >= 24 {
			step[i] = 1 // one step up, late: a burst or a pool grown
		}
		scatter[i] = float64(i%2) - 0.5
	}
	s, w := Fit(ts, step), Fit(ts, scatter)
	if s.Rho < 0.5 {
		t.Errorf("a step's residuals: rho %.2f, want them correlated", s.Rho)
	}
	if w.Rho != 0 {
		t.Errorf("alternating residuals: rho %.2f, want 0 (negative correlation is not credited)", w.Rho)
	}
	// A steady leak with scatter around its line keeps a narrow error.
	leak := make([]float64, len(ts))
	for i := range ts {
		leak[i] = 10 + ts[i] + scatter[i]/10
	}
	if f := Fit(ts, leak); f.Rho != 0 || f.StdErr > 0.05 {
		t.Errorf("leak fit %+v: want no widening", f)
	} else if ok, _ := f.Flat(); ok {
		t.Error("a leak of 1 a minute on 13 passed")
	}
}
