package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/internal/ban"
	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/ident"
	"danmaku/sdk/wire"
)

// The bans themselves live in internal/ban, which the edge and the gslb
// read too; these names keep the ingest's API and tests as they were.
type (
	// Ban is ban.Ban.
	Ban = ban.Ban
	// BanStore is ban.Store.
	BanStore = ban.Store
	// BanList is ban.List.
	BanList = ban.List
	// MemoryBanStore is ban.MemoryStore.
	MemoryBanStore = ban.MemoryStore
	// RedisBanStore is ban.RedisStore.
	RedisBanStore = ban.RedisStore
)

// Keys of the bans in Redis (ban.Key and its companions).
const (
	BansKey        = ban.Key
	BansVersionKey = ban.VersionKey
	BansExpiryKey  = ban.ExpiryKey
)

// NewMemoryBanStore returns an empty in-process BanStore.
func NewMemoryBanStore() *MemoryBanStore { return ban.NewMemoryStore() }

// NewRedisBanStore returns the bans kept in rdb.
func NewRedisBanStore(rdb redis.UniversalClient) *RedisBanStore { return ban.NewRedisStore(rdb) }

// BanListConfig configures an ingest's BanList: ban.ListConfig with the
// ingest's metrics (danmaku_ingest_banned_total, danmaku_ingest_bans),
// registered with Registerer (nil: a private registry).
type BanListConfig struct {
	Store      BanStore
	EventOf    func(room string) string
	Reload     time.Duration
	PurgeEvery time.Duration
	Clock      clock.Clock
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// NewBanList returns an ingest's BanList; call Refresh or Run to load it.
// The ingest purges lapsed bans (it may write the store).
func NewBanList(cfg BanListConfig) (*BanList, error) {
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	banned := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_banned_total",
		Help: "Comments dropped because their user is banned from the room.",
	})
	active := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "danmaku_ingest_bans",
		Help: "Bans in this node's snapshot.",
	})
	for _, c := range []prometheus.Collector{banned, active} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("ingest: bans metrics: %w", err)
		}
	}
	return ban.NewList(ban.ListConfig{Store: cfg.Store, EventOf: cfg.EventOf, What: "ingest: ban list", Reload: cfg.Reload, PurgeEvery: cfg.PurgeEvery,
		Clock: cfg.Clock, Banned: banned, Active: active, Logger: cfg.Logger})
}

// BanAPI is the operator API for bans, on gin, beside the events API:
//
//	PUT    /v1/admin/bans/{user}   body {"room": "" | "event": "", "until": RFC 3339 | "ttl_seconds": n, "reason": ""}
//	DELETE /v1/admin/bans/{user}?room=R | ?event=E
//	GET    /v1/admin/bans/{user}   → {"bans": [...]}
//	GET    /v1/admin/bans          → {"bans": [...]} (every ban in force)
//
// A ban with event covers that event's rooms; without room or event,
// every room; without until or ttl_seconds it
// never lapses. Every route needs an operator key (Authorization: Bearer).
// A change reaches every node's BanList within its reload interval.
type BanAPI struct {
	Store BanStore
	// Keys are the operator keys. Empty: every call is refused.
	Keys []string
	// Clock stamps bans and turns a TTL into a time. Nil: real clock.
	Clock clock.Clock
	// Changed, when set, is called after every successful write, so that
	// the process's own BanList reflects it at once.
	Changed func(ctx context.Context)
	// Logger receives the store errors, which answers do not carry. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// BanRequest is the body of PUT /v1/admin/bans/{user}; every field may be
// left out (an empty body bans from every room, for ever).
type BanRequest struct {
	Room       string    `json:"room"`
	Event      string    `json:"event"`
	Until      time.Time `json:"until"`
	TTLSeconds int64     `json:"ttl_seconds"`
	Reason     string    `json:"reason"`
}

// maxBanBody bounds a ban request body.
const maxBanBody = 4 << 10

// maxBanTTL bounds a ban with an end: ten years ahead. A longer one is a
// ban without an end (until and ttl_seconds left out). The bound also keeps
// ttl_seconds, turned into nanoseconds, far from overflowing: unchecked,
// 1e10 s wrapped around to an until in 1759, a ban not in force.
const maxBanTTL = 10 * 365 * 24 * time.Hour

// Register adds the routes to r.
func (a *BanAPI) Register(r gin.IRoutes) {
	auth := func(c *gin.Context) {
		if !httpx.KeyMatches(c, a.Keys) {
			httpx.Abort(c, httpx.Errorf(http.StatusUnauthorized, "bad_operator_key", "the bans API needs an operator key"))
		}
	}
	r.GET("/v1/admin/bans", auth, a.list)
	r.GET("/v1/admin/bans/:user", auth, a.get)
	r.PUT("/v1/admin/bans/:user", auth, a.put)
	r.DELETE("/v1/admin/bans/:user", auth, a.delete)
}

func (a *BanAPI) now() time.Time { return clock.Or(a.Clock).Now() }

func (a *BanAPI) storeError(c *gin.Context, op string, err error) {
	backendUnavailable(c, a.Logger, "bans store unavailable; nothing changed", op, err)
}

// backendUnavailable answers an operator API's store failure with the
// fixed message msg (503 backend_unavailable, Retry-After) and logs err
// with op and the route.
func backendUnavailable(c *gin.Context, log *slog.Logger, msg, op string, err error) {
	httpx.Abort(c, unavailable(c, log, msg, op, err))
}

// unavailable logs a backend failure (err, with op and the route) and
// returns the answer for it: 503 backend_unavailable with the fixed message
// msg and a Retry-After. It is the one answer to a failed store, for the
// comment path (Server.backendError) and the operator APIs alike. The
// error's text is for the logs only: it can name a Redis address, a key or
// a driver's internals, none of which a client can act on.
func unavailable(c *gin.Context, log *slog.Logger, msg, op string, err error) *httpx.Error {
	if log == nil {
		log = slog.Default()
	}
	log.ErrorContext(c.Request.Context(), "ingest: backend failed", "op", op, "route", c.FullPath(), "err", err)
	e := httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "%s", msg)
	e.RetryAfter = time.Second
	return e
}

func (a *BanAPI) put(c *gin.Context) {
	var req BanRequest
	if c.Request.ContentLength != 0 {
		if e := httpx.BindJSON(c, maxBanBody, &req); e != nil {
			httpx.Abort(c, e)
			return
		}
	}
	b, e := req.ban(c.Param("user"), a.now())
	if e != nil {
		httpx.Abort(c, e)
		return
	}
	ctx := c.Request.Context()
	if err := a.Store.Put(ctx, b); err != nil {
		a.storeError(c, "put ban", err)
		return
	}
	if a.Changed != nil {
		a.Changed(ctx)
	}
	c.JSON(http.StatusOK, b)
}

// ban is the ban of user req asks for at now, or its 400 bad_ban.
func (req *BanRequest) ban(user string, now time.Time) (Ban, *httpx.Error) {
	// The reason is cleaned as comments are: kept, without what only a
	// terminal or a bidi algorithm would act on.
	b := Ban{User: user, Room: req.Room, Event: req.Event, Until: req.Until, Reason: ident.CleanText(req.Reason), At: now}
	const maxTTLSeconds = int64(maxBanTTL / time.Second)
	switch {
	case req.TTLSeconds < 0 || req.TTLSeconds > maxTTLSeconds:
		return Ban{}, httpx.Errorf(http.StatusBadRequest, "bad_ban", "ttl_seconds must be 1-%d (10 years), or left out with until for a ban without an end (got %d)", maxTTLSeconds, req.TTLSeconds)
	case req.TTLSeconds > 0 && !req.Until.IsZero():
		return Ban{}, httpx.Errorf(http.StatusBadRequest, "bad_ban", "give until or ttl_seconds, not both")
	case req.TTLSeconds > 0:
		b.Until = now.Add(time.Duration(req.TTLSeconds) * time.Second)
	case !b.Until.IsZero() && (!b.Until.After(now) || b.Until.Sub(now) > maxBanTTL):
		return Ban{}, httpx.Errorf(http.StatusBadRequest, "bad_ban", "until must be in the future and at most 10 years ahead, or left out with ttl_seconds for a ban without an end (got %s)", b.Until.Format(time.RFC3339))
	}
	if err := b.Validate(); err != nil {
		return Ban{}, httpx.Errorf(http.StatusBadRequest, "bad_ban", "%v", err)
	}
	return b, nil
}

func (a *BanAPI) delete(c *gin.Context) {
	user, room, ev := c.Param("user"), c.Query("room"), c.Query("event")
	switch {
	case room != "" && !wire.ValidRoom(room):
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "room %q: 1-64 of A-Z a-z 0-9 _ -", room))
		return
	case ev != "" && !wire.ValidRoom(ev):
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "event %q: 1-64 of A-Z a-z 0-9 _ -", ev))
		return
	case room != "" && ev != "":
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "give room or event, not both"))
		return
	}
	scope := room
	if ev != "" {
		scope = ban.EventScope(ev)
	}
	ctx := c.Request.Context()
	if err := a.Store.Delete(ctx, user, scope); err != nil {
		a.storeError(c, "delete ban", err)
		return
	}
	if a.Changed != nil {
		a.Changed(ctx)
	}
	c.JSON(http.StatusOK, gin.H{"ok": true})
}

func (a *BanAPI) get(c *gin.Context) {
	bans, err := a.Store.User(c.Request.Context(), c.Param("user"))
	if err != nil {
		a.storeError(c, "read bans", err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"bans": a.active(bans)})
}

func (a *BanAPI) list(c *gin.Context) {
	bans, _, err := a.Store.List(c.Request.Context())
	if err != nil {
		a.storeError(c, "list bans", err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"bans": a.active(bans)})
}

// active keeps the bans in force: a lapsed one waits only for its purge.
func (a *BanAPI) active(bans []Ban) []Ban {
	now := a.now()
	out := make([]Ban, 0, len(bans))
	for _, b := range bans {
		if b.Active(now) {
			out = append(out, b)
		}
	}
	return out
}
