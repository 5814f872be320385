package ingest

import "github.com/gin-gonic/gin"

// roomKey is the gin context key under which a handler's room is kept once
// known (live sets it), so that a rejection is counted against its room.
const roomKey = "danmaku.ingest.room"

// roomOf is the room a request named, as far as its handler got: "" (the
// label OtherLabel) before the room was read.
func roomOf(c *gin.Context) string {
	if r, ok := c.Get(roomKey); ok {
		if room, ok := r.(string); ok {
			return room
		}
	}
	return c.Param("room")
}

// countAccepted counts a message of kind appended to room's stream. The
// event and room labels come from the event directory (MetricLabels): a
// room no event names is counted as "other", so clients naming rooms
// cannot grow the series.
func (s *Server) countAccepted(kind, room string) {
	ev, rm := s.cfg.Events.MetricLabels(room)
	s.accepted.WithLabelValues(kind, ev, rm).Inc()
}

// countRejected counts an upload for room not stored, by layer and reason
// (labels as countAccepted's).
func (s *Server) countRejected(layer, reason, room string) {
	ev, rm := s.cfg.Events.MetricLabels(room)
	s.rejected.WithLabelValues(layer, reason, ev, rm).Inc()
}
