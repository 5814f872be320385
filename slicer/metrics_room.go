package slicer

import (
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/event"
	"danmaku/sdk/wire"
)

// roomMetrics are the slicer's per-room series, for the show dashboard:
// segments written and the messages they show, by event and room. They are
// counted where a segment becomes durable — after its PUT succeeded, from
// the slot plan's messages (noteWritten), with no decode of the body.
// Rooms come from the event directory (event.Directory.MetricLabels): one
// series per room an event defines, plus "other".
type roomMetrics struct {
	events   *event.Directory
	segments *prometheus.CounterVec // event, room
	shown    *prometheus.CounterVec // kind, event, room
}

func newRoomMetrics(events *event.Directory) *roomMetrics {
	return &roomMetrics{
		events: events,
		segments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_slicer_room_segments_total",
			Help: "Segments this slicer wrote, by event and room (other: a room no event names).",
		}, []string{"event", "room"}),
		shown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_slicer_room_messages_total",
			Help: "Messages in the segments this slicer wrote, by kind (barrage, gift, system), event and room: what viewers are shown.",
		}, []string{"kind", "event", "room"}),
	}
}

func (m *roomMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.segments, m.shown}
}

// observe counts one segment of room written with msgs. It is called
// with the slot plan's messages after the PUT succeeded (noteWritten):
// counting them there costs no decode of the body just encoded.
func (m *roomMetrics) observe(room string, msgs []wire.Message) {
	ev, label := m.events.MetricLabels(room)
	m.segments.WithLabelValues(ev, label).Inc()
	var n [3]int
	for i := range msgs {
		switch msgs[i].Kind {
		case wire.KindBarrage:
			n[0]++
		case wire.KindGift:
			n[1]++
		default:
			n[2]++
		}
	}
	for i, kind := range [3]string{"barrage", "gift", "system"} {
		m.shown.WithLabelValues(kind, ev, label).Add(float64(n[i]))
	}
}
