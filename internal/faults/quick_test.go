package faults

import (
	"os"
	"testing"
	"time"
)

// quickLoad and quickWarm are the short variant's load: a handful of
// viewers and senders, a few gifts a second, an offer of seconds with the
// fault early in it. Enough gifts cross every fault to show one lost or
// doubled; too few to say anything about capacity.
var (
	quickLoad = load{viewers: 10, senders: 4, gifts: 5, offer: 8 * time.Second, drain: 10 * time.Second}
	quickWarm = 3 * time.Second
)

// quickOutage is the outage rows' length in the short variant.
const quickOutage = 3 * time.Second

// TestFaultTableQuick is the fault table's short variant, in `make test`:
// every row of faultRows on its own fresh stack (no Prometheus: the
// alerts column is the table's) under a tiny load, the outages 3 s. It
// asserts only what must hold at any load and speed — no (viewer, gift)
// pair lost or doubled, no gift id in two segments — and logs the row
// (recovery times are reported, never asserted: they are the machine's).
// Skipped with -short, and when DANMAKU_RELIABILITY asks for the table
// itself (TestReliability runs the same rows at load).
func TestFaultTableQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault table's short variant starts a stack per row (a few minutes)")
	}
	if os.Getenv("DANMAKU_RELIABILITY") != "" {
		t.Skip("DANMAKU_RELIABILITY: TestReliability runs the rows at load")
	}
	defer func(d time.Duration) { outage = d }(outage)
	outage = quickOutage
	for _, f := range faultRows {
		f.opts.quick = true
		t.Run(f.name, func(t *testing.T) {
			start := time.Now()
			row := runRow(t, f, quickLoad, quickWarm)
			t.Logf("%.0f s\n%s", time.Since(start).Seconds(), Markdown([]Row{row}))
			if row.Lost != 0 || row.Doubled != 0 || row.GiftsSegmentDoubled != 0 {
				t.Errorf("gifts lost %d, doubled %d (viewer, gift) pairs, %d in two segments; want none", row.Lost, row.Doubled, row.GiftsSegmentDoubled)
			}
		})
	}
}
