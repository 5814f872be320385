package ingest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/httpx"
)

// LotteryAPI is the API for lotteries, on gin, beside the events and bans
// APIs:
//
//	POST /v1/admin/rooms/{room}/lotteries                 body {"id", "keyword", "until" | "duration_seconds"} → 201 the lottery
//	GET  /v1/admin/rooms/{room}/lotteries                 → {"lotteries": [...]} (running, as this store sees them)
//	GET  /v1/admin/rooms/{room}/lotteries/{id}            → {"lottery": {...}, "entrants": n}
//	POST /v1/admin/rooms/{room}/lotteries/{id}/stop       → {"lottery": {...}, "entrants": n}
//	GET  /v1/admin/rooms/{room}/lotteries/{id}/entrants?cursor=C&count=N
//	                                                      → {"entrants": [...], "cursor": "next" ("0": done), "total": n}
//
// Every route needs an operator key or, when Hosts is set, the dynamic
// token of the room's host or an admin (Authorization: Bearer). Starting
// is idempotent by id: a start of a running lottery with the same keyword
// (a retry) answers 201 with the lottery as first started. Each
// entrant is one user id, listed by pages (a page may repeat a user on
// Redis; every entrant is listed at least once).
type LotteryAPI struct {
	Store LotteryStore
	// Keys are the operator keys. Empty: only hosts (if Hosts is set).
	Keys []string
	// Hosts verifies hosts' dynamic tokens. Nil: operator keys only.
	Hosts *auth.Keyring
	// Addr is this node's advertised address: a host's token not issued
	// for it is refused (403 wrong_node), as an announcement's is. Empty:
	// not checked (a single node).
	Addr string
	// Clock stamps starts and stops. Nil: real clock.
	Clock clock.Clock
	// Changed, when set, is called after every start and stop, so that
	// the process's own Lotteries reflect it at once rather than within
	// its reload interval.
	Changed func(ctx context.Context)
	// Logger receives the store errors, which answers do not carry. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// LotteryRequest is the body of a start.
type LotteryRequest struct {
	ID              string    `json:"id"`
	Keyword         string    `json:"keyword"`
	Until           time.Time `json:"until"`
	DurationSeconds int64     `json:"duration_seconds"`
}

// maxLotteryBody bounds a start request body.
const maxLotteryBody = 4 << 10

// defaultEntrantsPage is a page of entrants when count is not given.
const defaultEntrantsPage = 1000

// hostKey is where the auth step leaves the host's user id.
const hostKey = "lottery_host"

// Register adds the routes to r.
func (a *LotteryAPI) Register(r gin.IRoutes) {
	r.POST("/v1/admin/rooms/:room/lotteries", a.auth, a.start)
	r.GET("/v1/admin/rooms/:room/lotteries", a.auth, a.list)
	r.GET("/v1/admin/rooms/:room/lotteries/:id", a.auth, a.get)
	r.POST("/v1/admin/rooms/:room/lotteries/:id/stop", a.auth, a.stop)
	r.GET("/v1/admin/rooms/:room/lotteries/:id/entrants", a.auth, a.entrants)
}

func (a *LotteryAPI) now() time.Time { return clock.Or(a.Clock).Now() }

// auth admits an operator key, or a host's or admin's token for this room.
func (a *LotteryAPI) auth(c *gin.Context) { roomAdminAuth(c, a.Keys, a.Hosts, a.Addr, "lotteries") }

// roomAdminAuth is the auth of a room's operator APIs (lotteries,
// takedowns): an operator key, or the dynamic token of the room's host or
// an admin, issued for this node (addr; "" not checked). A token's user is
// left under hostKey ("" for an operator key). what names the API in the
// answers.
func roomAdminAuth(c *gin.Context, keys []string, hosts *auth.Keyring, addr, what string) {
	if httpx.KeyMatches(c, keys) {
		return
	}
	if hosts != nil {
		if claims, err := hosts.Verify(httpx.BearerToken(c, "")); err == nil {
			if addr != "" && !claims.HasAddr(addr) {
				httpx.Abort(c, httpx.Errorf(http.StatusForbidden, "wrong_node", "token was not issued for this node"))
				return
			}
			if claims.Room != c.Param("room") || (claims.Role != auth.RoleHost && claims.Role != auth.RoleAdmin) {
				httpx.Abort(c, httpx.Errorf(http.StatusForbidden, "forbidden", "%s of a room need its host's or an admin's token, or an operator key", what))
				return
			}
			c.Set(hostKey, claims.User())
			return
		}
	}
	httpx.Abort(c, httpx.Errorf(http.StatusUnauthorized, "bad_operator_key", "the %s API needs an operator key or a host token", what))
}

// fail answers a validation or store error of op with its code. The
// sentinel errors' texts are the client's to read; any other is logged and
// answered with a fixed message.
func (a *LotteryAPI) fail(c *gin.Context, op string, err error) {
	var e *httpx.Error
	switch {
	case errors.Is(err, ErrBadLottery):
		e = httpx.Errorf(http.StatusBadRequest, "bad_lottery", "%v", err)
	case errors.Is(err, ErrNoLottery):
		e = httpx.Errorf(http.StatusNotFound, "no_such_lottery", "%v", err)
	case errors.Is(err, ErrLotteryExists):
		e = httpx.Errorf(http.StatusConflict, "lottery_exists", "%v; choose another id", err)
	default:
		backendUnavailable(c, a.Logger, "lottery store unavailable", op, err)
		return
	}
	httpx.Abort(c, e)
}

func (a *LotteryAPI) changed(ctx context.Context) {
	if a.Changed != nil {
		a.Changed(ctx)
	}
}

func (a *LotteryAPI) start(c *gin.Context) {
	var req LotteryRequest
	if e := httpx.BindJSON(c, maxLotteryBody, &req); e != nil {
		httpx.Abort(c, e)
		return
	}
	now := a.now()
	l := Lottery{ID: req.ID, Room: c.Param("room"), Keyword: normalize(req.Keyword), Until: req.Until, StartedAt: now, StartedBy: c.GetString(hostKey)}
	const maxSeconds = int64(maxLotteryLength / time.Second)
	switch {
	case req.DurationSeconds < 0 || req.DurationSeconds > maxSeconds:
		// Checked before it becomes nanoseconds, which would overflow.
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_lottery", "duration_seconds must be 1-%d (a lottery runs at most %v) (got %d)", maxSeconds, maxLotteryLength, req.DurationSeconds))
		return
	case req.DurationSeconds > 0 && !req.Until.IsZero():
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_lottery", "give until or duration_seconds, not both"))
		return
	case req.DurationSeconds > 0:
		// Whole milliseconds: what the stores keep, so a start sent again
		// with the same until compares equal.
		l.Until = now.Add(time.Duration(req.DurationSeconds) * time.Second).Truncate(time.Millisecond)
	case req.Until.IsZero():
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_lottery", "give until or duration_seconds"))
		return
	}
	if err := l.Validate(now); err != nil {
		a.fail(c, "validate lottery", err)
		return
	}
	ctx := c.Request.Context()
	l, err := a.Store.Start(ctx, l)
	if err != nil {
		a.fail(c, "start lottery", err)
		return
	}
	a.changed(ctx)
	c.JSON(http.StatusCreated, l)
}

func (a *LotteryAPI) list(c *gin.Context) {
	running, _, err := a.Store.Running(c.Request.Context())
	if err != nil {
		a.fail(c, "list lotteries", err)
		return
	}
	out := []Lottery{}
	room := c.Param("room")
	for _, l := range running {
		if l.Room == room {
			out = append(out, l)
		}
	}
	c.JSON(http.StatusOK, gin.H{"lotteries": out})
}

// answer writes a lottery with its entrant count.
func (a *LotteryAPI) answer(c *gin.Context, l Lottery) {
	n, err := a.Store.Count(c.Request.Context(), l.Room, l.ID)
	if err != nil {
		a.fail(c, "count entrants", err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"lottery": l, "open": l.Open(a.now()), "entrants": n})
}

func (a *LotteryAPI) get(c *gin.Context) {
	l, err := a.Store.Get(c.Request.Context(), c.Param("room"), c.Param("id"))
	if err != nil {
		a.fail(c, "get lottery", err)
		return
	}
	a.answer(c, l)
}

func (a *LotteryAPI) stop(c *gin.Context) {
	ctx := c.Request.Context()
	l, err := a.Store.Stop(ctx, c.Param("room"), c.Param("id"), a.now())
	if err != nil {
		a.fail(c, "stop lottery", err)
		return
	}
	a.changed(ctx)
	a.answer(c, l)
}

func (a *LotteryAPI) entrants(c *gin.Context) {
	var cursor uint64
	if s := c.Query("cursor"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_cursor", "cursor must be the cursor of the previous page, or 0"))
			return
		}
		cursor = v
	}
	count := defaultEntrantsPage
	if s := c.Query("count"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > maxEntrantsPage {
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_count", "count must be 1-%d", maxEntrantsPage))
			return
		}
		count = v
	}
	ctx := c.Request.Context()
	room, id := c.Param("room"), c.Param("id")
	// Get first: an unknown lottery is a 404, not an empty list.
	if _, err := a.Store.Get(ctx, room, id); err != nil {
		a.fail(c, "get lottery", err)
		return
	}
	users, next, err := a.Store.Entrants(ctx, room, id, cursor, count)
	if err != nil {
		a.fail(c, "list entrants", err)
		return
	}
	total, err := a.Store.Count(ctx, room, id)
	if err != nil {
		a.fail(c, "count entrants", err)
		return
	}
	if users == nil {
		users = []string{}
	}
	c.JSON(http.StatusOK, gin.H{"entrants": users, "cursor": strconv.FormatUint(next, 10), "total": total})
}
