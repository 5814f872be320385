package gslb

import (
	"net/http"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/httpx"
)

// DevTicketPath mints business tickets in embedded mode, so that the demo
// page (and a newcomer's curl) can join without a login service.
const DevTicketPath = "/v1/dev/ticket"

// devTicketTTL is long enough for a demo session; the SDK refreshes its
// entry, not its ticket.
const devTicketTTL = 12 * time.Hour

var devUserRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// RegisterDevTickets serves GET DevTicketPath?user=U[&nick=N][&role=R],
// answering {"ticket": "..."} signed with key. Register it only where key is
// the public auth.DevTicketKey (embedded mode): anyone may call it.
func RegisterDevTickets(r gin.IRoutes, key []byte) {
	r.GET(DevTicketPath, func(c *gin.Context) {
		user, nick, role := c.Query("user"), c.Query("nick"), c.DefaultQuery("role", auth.RoleViewer)
		switch {
		case !devUserRE.MatchString(user):
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_user", "user must be 1-64 characters of A-Z a-z 0-9 _ -"))
			return
		case !utf8.ValidString(nick) || utf8.RuneCountInString(nick) > 32:
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_nick", "nick must be at most 32 characters of valid UTF-8"))
			return
		case !auth.ValidRole(role):
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_role", "role must be viewer, host or admin"))
			return
		}
		t, err := auth.MintTicket(key, user, auth.Ticket{Nick: nick, Role: role}, devTicketTTL)
		if err != nil {
			httpx.Abort(c, httpx.Errorf(http.StatusInternalServerError, httpx.CodeInternal, "cannot mint a ticket"))
			return
		}
		c.Header("Cache-Control", "no-store")
		c.JSON(http.StatusOK, gin.H{"ticket": t})
	})
}
