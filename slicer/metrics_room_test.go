package slicer

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/internal/event"
	"danmaku/sdk/wire"
)

// TestRoomMetricsBounded: stored segments are counted by event and room,
// and segments of 10,000 rooms no event names make one "other" series.
func TestRoomMetricsBounded(t *testing.T) {
	now := time.Now()
	ev := event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "main"}, {ID: "vip"}}}
	dir, err := event.DirectoryOf(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	m := newRoomMetrics(dir)
	put := func(room string, slot int64, msgs ...wire.Message) {
		t.Helper()
		m.observe(room, msgs)
	}
	msg := func(k wire.Kind, id string) wire.Message { return wire.Message{Kind: k, ID: id, Text: "x"} }
	put("main", 1, msg(wire.KindBarrage, "1000-0"), msg(wire.KindBarrage, "1000-1"), msg(wire.KindGift, "1000-0"))
	for i := range 10000 {
		put(fmt.Sprintf("room%d", i), 2)
	}
	if got := testutil.ToFloat64(m.shown.WithLabelValues("barrage", "show", "main")); got != 2 {
		t.Errorf("barrage shown in main = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.segments.WithLabelValues(event.OtherLabel, event.OtherLabel)); got != 10000 {
		t.Errorf("segments of other rooms = %v, want 10000", got)
	}
	if n := testutil.CollectAndCount(m.segments); n > len(ev.Rooms)+1 {
		t.Errorf("%d segment series after 10,000 rooms, want at most %d", n, len(ev.Rooms)+1)
	}
	if n := testutil.CollectAndCount(m.shown); n > 3*(len(ev.Rooms)+1) {
		t.Errorf("%d shown series after 10,000 rooms, want at most %d", n, 3*(len(ev.Rooms)+1))
	}
}
