package gslb

import (
	"github.com/gin-gonic/gin"

	"net/http"
	"strconv"

	"danmaku/internal/httpx"
	"danmaku/sdk/wire"
)

// answerShape is what an entry answer says besides the allocation: the
// room's segment duration and whether the client may sync to its playhead.
type answerShape struct {
	segmentMs int64
	sync      bool
}

// Defaults of the protocol settings: every protocol served, playhead sync
// for every client that speaks it.
const (
	defaultMinProtocol     = 1
	defaultSyncMinProtocol = 2
)

// protocol reads the entry request's proto parameter (absent: 1, the
// clients from before it) and refuses one below the minimum the gslb
// serves, naming it, so an app can tell its user to update.
func (s *Server) protocol(c *gin.Context) (int, *httpx.Error) {
	v, ok := c.GetQuery("proto")
	if !ok {
		return 1, s.checkProtocol(1)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > wire.MaxProtocol || strconv.Itoa(n) != v {
		return 0, httpx.Errorf(http.StatusBadRequest, "bad_protocol", "proto must be a whole number 1-%d without sign or leading zeros", wire.MaxProtocol)
	}
	return n, s.checkProtocol(n)
}

func (s *Server) checkProtocol(n int) *httpx.Error {
	if n < s.cfg.MinProtocol {
		return httpx.Errorf(http.StatusUpgradeRequired, "protocol_unsupported", "client protocol %d is no longer served; the minimum is %d: update the SDK", n, s.cfg.MinProtocol)
	}
	return nil
}
