package edge

import "github.com/prometheus/client_golang/prometheus"

// roomConnections is danmaku_edge_room_connections: the node's open
// connections by event and room, worked out from the hubs at each scrape.
// Rooms no event names count under "other" (event.Directory.MetricLabels),
// so the series are bounded by the events, whatever rooms clients ask for;
// a room whose last connection left has no series.
type roomConnections struct {
	s    *Server
	desc *prometheus.Desc
}

func newRoomConnections(s *Server) *roomConnections {
	return &roomConnections{s: s, desc: prometheus.NewDesc(
		"danmaku_edge_room_connections",
		"Open WebSocket connections holding a room on this node, by event and room (other: a room no event names).",
		[]string{"event", "room"}, nil)}
}

func (r *roomConnections) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *roomConnections) Collect(ch chan<- prometheus.Metric) {
	byLabels := map[[2]string]int{}
	r.s.mu.Lock()
	for room, h := range r.s.hubs {
		ev, rm := r.s.cfg.Events.MetricLabels(room)
		byLabels[[2]string{ev, rm}] += h.refs
	}
	r.s.mu.Unlock()
	for k, n := range byLabels {
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
