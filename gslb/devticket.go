package gslb

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/httpx"
	"danmaku/internal/ident"
)

// DevTicketPath mints business tickets in embedded mode, so that the demo
// page (and a newcomer's curl) can join without a login service.
const DevTicketPath = "/v1/dev/ticket"

// devTicketTTL is long enough for a demo session; the SDK refreshes its
// entry, not its ticket.
const devTicketTTL = 12 * time.Hour

// RegisterDevTickets serves GET DevTicketPath?user=U[&nick=N][&av=A][&role=R],
// answering {"ticket": "..."} signed with key. Register it only where key is
// the public auth.DevTicketKey (embedded mode): anyone may call it. The
// fields follow the identity rules tickets are verified by (internal/ident),
// so a dev ticket never fails at entry; the nickname is minted cleaned.
func RegisterDevTickets(r gin.IRoutes, key []byte) {
	r.GET(DevTicketPath, func(c *gin.Context) {
		user, av, role := c.Query("user"), c.Query("av"), c.DefaultQuery("role", auth.RoleViewer)
		if err := ident.CheckUser(user); err != nil {
			httpx.Abort(c, identError("bad_user", err))
			return
		}
		nick, err := ident.CleanNick(c.Query("nick"))
		if err != nil {
			httpx.Abort(c, identError("bad_nick", err))
			return
		}
		if err := ident.CheckAvatar(av); err != nil {
			httpx.Abort(c, identError("bad_avatar", err))
			return
		}
		if !auth.ValidRole(role) {
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_role", "role must be viewer, host or admin"))
			return
		}
		t, err := auth.MintTicket(key, user, auth.Ticket{Nick: nick, Avatar: av, Role: role}, devTicketTTL)
		if err != nil {
			httpx.Abort(c, httpx.Errorf(http.StatusInternalServerError, httpx.CodeInternal, "cannot mint a ticket"))
			return
		}
		c.Header("Cache-Control", "no-store")
		c.JSON(http.StatusOK, gin.H{"ticket": t})
	})
}

// identError answers an identity rule broken, naming the query parameter.
func identError(code string, err error) *httpx.Error {
	return httpx.Errorf(http.StatusBadRequest, code, "%v", err)
}
