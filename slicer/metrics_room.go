package slicer

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/sdk/wire"
)

// roomMetrics are the slicer's per-room series, for the show dashboard:
// segments written and the messages they show, by event and room. They are
// counted where a segment becomes durable — a successful PUT of a segment
// object, decoded once more here (a room's segment a second, at most the
// budget's messages) — so that the room loop itself carries no metric of
// its own. Rooms come from the event directory (event.Directory.
// MetricLabels): one series per room an event defines, plus "other".
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

// observe counts one written segment.
func (m *roomMetrics) observe(body []byte) {
	seg, err := wire.DecodeSegment(body)
	if err != nil {
		return // the slicer's own encoding: never happens
	}
	ev, room := m.events.MetricLabels(seg.Room)
	m.segments.WithLabelValues(ev, room).Inc()
	var n [3]int
	for i := range seg.Messages {
		switch seg.Messages[i].Kind {
		case wire.KindBarrage:
			n[0]++
		case wire.KindGift:
			n[1]++
		default:
			n[2]++
		}
	}
	for i, kind := range [3]string{"barrage", "gift", "system"} {
		m.shown.WithLabelValues(kind, ev, room).Add(float64(n[i]))
	}
}

// countingObjects is the slicer's object store: the configured one, with
// every segment it stores counted by roomMetrics.
type countingObjects struct {
	objstore.Store
	m *roomMetrics
}

func (o countingObjects) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	etag, err := o.Store.Put(ctx, key, body, opts)
	if err == nil && opts.ContentType == wire.SegmentContentType {
		o.m.observe(body)
	}
	return etag, err
}
