package event

import (
	"fmt"
	"testing"
	"time"
)

// TestMetricLabelsBounded: a client naming 10,000 rooms creates at most one
// label value per room the events define, plus OtherLabel.
func TestMetricLabelsBounded(t *testing.T) {
	now := time.Now()
	ev := Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		Rooms: []Room{{ID: "main"}, {ID: "backstage"}, {ID: "vip"}}}
	d, err := DirectoryOf(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[[2]string]bool{}
	for _, r := range ev.Rooms {
		e, rm := d.MetricLabels(r.ID)
		if e != "show" || rm != r.ID {
			t.Fatalf("MetricLabels(%q) = %q, %q; want show, %[1]q", r.ID, e, rm)
		}
		pairs[[2]string{e, rm}] = true
	}
	for i := range 10000 {
		e, rm := d.MetricLabels(fmt.Sprintf("room%d", i))
		pairs[[2]string{e, rm}] = true
	}
	if len(pairs) > len(ev.Rooms)+1 {
		t.Fatalf("%d label pairs from 10,000 rooms, want at most %d", len(pairs), len(ev.Rooms)+1)
	}
	if e, rm := (*Directory)(nil).MetricLabels("main"); e != OtherLabel || rm != OtherLabel {
		t.Fatalf("nil directory: %q, %q", e, rm)
	}
}
