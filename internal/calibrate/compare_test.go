package calibrate

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"danmaku/internal/plan"
)

func TestSpread(t *testing.T) {
	// The docs' earlier ingest runs: ±58 %.
	if s := Spread([]float64{6658, 3128, 3017}); math.Abs(s-0.582) > 0.001 {
		t.Errorf("Spread = %v, want 0.582", s)
	}
	if s := Spread([]float64{5}); s != 0 {
		t.Errorf("one run: %v", s)
	}
}

func profileWith(load float64, ingest, entry float64) *plan.Profile {
	p := &plan.Profile{V: plan.ProfileVersion, Machine: plan.Machine{Cores: 2, LoadAvg1m: load}}
	for n, f := range plan.DesignFigures() {
		p.Figures.Set(n, f)
	}
	p.Figures.Set("ingest_admitted_per_s_per_core", measured(ingest, "comments/(s·core)", ""))
	p.Figures.Set("entry_answers_per_s_per_core", measured(entry, "entries/(s·core)", ""))
	p.Figures.Set("gslb_idle_cpu_cores", measured(0.07, "cores", ""))
	return p
}

func TestCompare(t *testing.T) {
	var out bytes.Buffer
	ps := []*plan.Profile{profileWith(20, 3000, 10000), profileWith(30, 4000, 10500), profileWith(25, 3500, 9900)}
	over, err := Compare(&out, ps, 0.15)
	if err != nil {
		t.Fatal(err)
	}
	// ingest: (4000-3000)/2/3500 = 14 %; entry: 600/2/10000 = 3 %.
	if len(over) != 0 {
		t.Fatalf("over = %v\n%s", over, out.String())
	}
	for _, want := range []string{"run 2 (load 30)", "ingest_admitted_per_s_per_core", "3500", "14 %", "gslb_idle_cpu_cores", "every measured figure within ±15 %"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "s3_puts_per_room_segment") {
		t.Errorf("a design figure is compared:\n%s", out.String())
	}
	out.Reset()
	over, err = Compare(&out, ps, 0.10)
	if err != nil || !slices.Equal(over, []string{"ingest_admitted_per_s_per_core"}) {
		t.Fatalf("over = %v, %v\n%s", over, err, out.String())
	}
	if !strings.Contains(out.String(), "1 of the measured figures spread over ±10 %") {
		t.Errorf("no verdict:\n%s", out.String())
	}
	if _, err := Compare(&out, ps[:1], 0.15); err == nil {
		t.Fatal("one profile compared")
	}
}
