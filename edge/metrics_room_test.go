package edge

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/internal/event"
)

// TestRoomConnections: danmaku_edge_room_connections counts a room's
// connections under its event and room (the directory's labels).
func TestRoomConnections(t *testing.T) {
	now := time.Now()
	dir, err := event.DirectoryOf(nil, event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "r1"}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.Registerer = reg; c.Events = dir }})
	e.connect("r1", "")
	e.connect("r1", "")
	want := `
# HELP danmaku_edge_room_connections Open WebSocket connections holding a room on this node, by event and room (other: a room no event names).
# TYPE danmaku_edge_room_connections gauge
danmaku_edge_room_connections{event="show",room="r1"} 2
`
	waitFor(t, "two connections in r1", func() bool {
		return testutil.GatherAndCompare(reg, strings.NewReader(want), "danmaku_edge_room_connections") == nil
	})
}
