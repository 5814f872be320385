package ingest

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/sdk/wire"
)

// TakedownAPI is the API for takedowns, on gin, beside the lotteries API:
//
//	POST /v1/admin/rooms/{room}/takedowns   body {"id", "k", "reason"} → 201 {"takedown": {...}} (200 with the first one for a message already taken down)
//	GET  /v1/admin/rooms/{room}/takedowns   → {"takedowns": [...]} (oldest first)
//
// Both need an operator key or, when Hosts is set, the dynamic token of the
// room's host or an admin (Authorization: Bearer), as the lotteries API.
type TakedownAPI struct {
	// Server takes the messages down (Server.TakeDown). Required.
	Server *Server
	// Keys are the operator keys. Empty: only hosts (if Hosts is set).
	Keys []string
	// Hosts verifies hosts' dynamic tokens. Nil: operator keys only.
	Hosts *auth.Keyring
	// Addr is this node's advertised address: a host's token not issued
	// for it is refused (403 wrong_node). Empty: not checked.
	Addr string
	// Logger receives the store errors, which answers do not carry. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// TakedownRequest is the body of a takedown.
type TakedownRequest struct {
	ID     string    `json:"id"`
	Kind   wire.Kind `json:"k"`
	Reason string    `json:"reason"`
}

// takedownByOperator is Takedown.By for an operator key.
const takedownByOperator = "operator"

// Register adds the routes to r.
func (a *TakedownAPI) Register(r gin.IRoutes) {
	r.POST("/v1/admin/rooms/:room/takedowns", a.auth, checkRoomParam, a.take)
	r.GET("/v1/admin/rooms/:room/takedowns", a.auth, checkRoomParam, a.list)
}

func (a *TakedownAPI) auth(c *gin.Context) { roomAdminAuth(c, a.Keys, a.Hosts, a.Addr, "takedowns") }

// checkRoomParam refuses a room name that no room can have (400 bad_room).
func checkRoomParam(c *gin.Context) {
	if !wire.ValidRoom(c.Param("room")) {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_room", "room must be 1-64 of A-Z a-z 0-9 _ -"))
	}
}

func (a *TakedownAPI) take(c *gin.Context) {
	var req TakedownRequest
	if e := httpx.BindJSON(c, maxTakedownBody, &req); e != nil {
		httpx.Abort(c, e)
		return
	}
	by := c.GetString(hostKey)
	if by == "" {
		by = takedownByOperator
	}
	td, created, err := a.Server.takeDown(c.Request.Context(), c.Param("room"), wire.TakenDown{ID: req.ID, Kind: req.Kind}, by, req.Reason)
	if err != nil {
		a.fail(c, "take down", err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, gin.H{"takedown": td})
}

func (a *TakedownAPI) list(c *gin.Context) {
	list, err := a.Server.cfg.Takedowns.List(c.Request.Context(), c.Param("room"))
	if err != nil {
		a.fail(c, "list takedowns", err)
		return
	}
	if list == nil {
		list = []Takedown{}
	}
	c.JSON(http.StatusOK, gin.H{"takedowns": list})
}

// fail answers an error of op with its code; a backend's is logged and
// answered 503 with a fixed message.
func (a *TakedownAPI) fail(c *gin.Context, op string, err error) {
	if e, ok := takedownError(err); ok {
		httpx.Abort(c, e)
		return
	}
	var re *event.RoomError
	if errors.As(err, &re) {
		httpx.Abort(c, event.RoomHTTPError(err))
		return
	}
	backendUnavailable(c, a.Logger, "takedown store unavailable", op, err)
}
