package ingest

import (
	"net/http"
	"time"

	"danmaku/internal/httpx"
)

// A comment or announcement may carry the sender's playhead: the program
// date time (unix ms) of the video frame on the sender's screen when it was
// typed (docs/api.md, "Playhead time"). Receivers synchronised to their own
// video show it when their playhead reaches that time, so a sender's clock
// that runs ahead would spoil the moment for everyone behind, and a value far
// in the past would be pinned to a moment no live viewer will see again.
const (
	// defaultPlayheadAhead is how far past the ingest's clock a playhead may
	// be: the encoder stamping program date times and this node disagree by
	// a little, and a viewer's playhead can never be ahead of reality.
	defaultPlayheadAhead = 2 * time.Second
	// defaultPlayheadBehind is the oldest playhead accepted: four times the
	// 30 s delay of the slowest live players, so a stalled or rewound
	// player's comment still lands, but not one pinned to a moment no live
	// viewer will play again.
	defaultPlayheadBehind = 2 * time.Minute
)

// playhead checks a body's playhead_ms against the node's clock. Zero or
// absent: none (an old client), placed at its id's time by receivers.
func (s *Server) playhead(p *int64) (int64, *httpx.Error) {
	if p == nil {
		return 0, nil
	}
	now := s.cfg.Clock.Now().UnixMilli()
	switch {
	case *p <= 0:
		return 0, httpx.Errorf(http.StatusBadRequest, "bad_playhead", "playhead_ms must be a positive unix time in milliseconds")
	case *p > now+s.cfg.PlayheadAhead.Milliseconds():
		return 0, httpx.Errorf(http.StatusBadRequest, "playhead_future", "playhead_ms is more than %s ahead of the server's clock", s.cfg.PlayheadAhead)
	case *p < now-s.cfg.PlayheadBehind.Milliseconds():
		return 0, httpx.Errorf(http.StatusBadRequest, "playhead_too_old", "playhead_ms is more than %s behind the server's clock", s.cfg.PlayheadBehind)
	}
	return *p, nil
}
