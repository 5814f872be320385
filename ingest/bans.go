package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/ident"
	"danmaku/internal/reload"
	"danmaku/internal/wire"
)

// Ban keeps one user's comments out of one room, or out of every room.
type Ban struct {
	// User is the banned user id, as in their tickets. Required.
	User string `json:"user"`
	// Room limits the ban to one room. "": every room.
	Room string `json:"room,omitempty"`
	// Until is when the ban lapses. Zero: never.
	Until time.Time `json:"until,omitzero"`
	// Reason is for operators.
	Reason string `json:"reason,omitempty"`
	// At is when the ban was set.
	At time.Time `json:"at"`
}

// Active reports whether b is in force at now.
func (b *Ban) Active(now time.Time) bool { return b.Until.IsZero() || now.Before(b.Until) }

// maxReasonBytes bounds a ban's reason.
const maxReasonBytes = 500

// Validate checks b's fields. The user id follows the user id rules of
// tickets and gifts (ident.CheckUser): a ban of an id no ticket can carry
// would ban nobody, and one that is not UTF-8 would be listed as U+FFFD,
// an id the ban cannot be lifted by. The reason is shown text, as cleaned
// (ident.CleanText): no control characters (a terminal escape in an
// operator's console), no format characters (a bidi override).
func (b *Ban) Validate() error {
	if err := ident.CheckUser(b.User); err != nil {
		return fmt.Errorf("ingest: ban: %w", err)
	}
	switch {
	case b.Room != "" && !wire.ValidRoom(b.Room):
		return fmt.Errorf("ingest: ban: room %q: 1-64 of A-Z a-z 0-9 _ -", b.Room)
	case len(b.Reason) > maxReasonBytes:
		return fmt.Errorf("ingest: ban: reason: at most %d bytes (got %d)", maxReasonBytes, len(b.Reason))
	case b.Reason != ident.CleanText(b.Reason):
		return errors.New("ingest: ban: reason: control or format characters, or white space to collapse; clean it as shown text (ident.CleanText)")
	}
	return nil
}

// BanStore keeps the bans. Every write moves a version, so that a reader
// polling every second re-reads the bans only when they changed.
type BanStore interface {
	// Put sets a ban (replacing the same user's ban for the same room).
	Put(ctx context.Context, b Ban) error
	// Delete lifts user's ban for room ("" = the every-room ban); lifting
	// a ban that does not exist is not an error.
	Delete(ctx context.Context, user, room string) error
	// User returns user's bans, expired ones included, by room.
	User(ctx context.Context, user string) ([]Ban, error)
	// Version returns a value that changes with every write.
	Version(ctx context.Context) (int64, error)
	// List returns every ban and the version they are at.
	List(ctx context.Context) ([]Ban, int64, error)
	// Purge deletes the bans that lapsed before now (atomically per ban:
	// a ban renewed meanwhile stays).
	Purge(ctx context.Context, now time.Time) (int, error)
}

// Defaults of BanListConfig.
const (
	defaultBanReload = time.Second
	defaultBanPurge  = 10 * time.Minute
)

// BanListConfig configures a BanList.
type BanListConfig struct {
	// Store is where bans live. Required.
	Store BanStore
	// Reload is how often the store's version is checked. Zero: 1 s.
	Reload time.Duration
	// PurgeEvery is how often lapsed bans are deleted from the store. Zero:
	// 10 minutes. Negative: never (another process purges).
	PurgeEvery time.Duration
	// Clock judges expiry. Nil: real clock.
	Clock clock.Clock
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// BanList is a process's view of the bans: a snapshot of the BanStore,
// reloaded when the store's version moves (checked every second, like
// event.Directory), so Banned is a map read. A failed reload keeps the
// last snapshot; until the first load, nobody is banned (Ready is false).
// Safe for concurrent use.
type BanList struct {
	store BanStore
	every time.Duration
	purge time.Duration
	clk   clock.Clock
	log   *slog.Logger

	snap atomic.Pointer[banSnapshot]

	banned prometheus.Counter
	active prometheus.Gauge
}

type banKey struct{ user, room string }

type banSnapshot struct {
	version int64
	until   map[banKey]time.Time // zero: never lapses
}

// NewBanList returns a BanList; call Refresh or Run to load it.
func NewBanList(cfg BanListConfig) (*BanList, error) {
	if cfg.Store == nil {
		return nil, errors.New("ingest: bans: Store is required")
	}
	if cfg.Reload < 0 {
		return nil, errors.New("ingest: bans: negative Reload")
	}
	if cfg.Reload == 0 {
		cfg.Reload = defaultBanReload
	}
	if cfg.PurgeEvery == 0 {
		cfg.PurgeEvery = defaultBanPurge
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &BanList{store: cfg.Store, every: cfg.Reload, purge: cfg.PurgeEvery, clk: clock.Or(cfg.Clock), log: cfg.Logger}
	l.banned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_banned_total",
		Help: "Comments dropped because their user is banned from the room.",
	})
	l.active = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "danmaku_ingest_bans",
		Help: "Bans in this node's snapshot.",
	})
	for _, c := range []prometheus.Collector{l.banned, l.active} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("ingest: bans metrics: %w", err)
		}
	}
	return l, nil
}

// Refresh reloads the snapshot if the store's version moved.
func (l *BanList) Refresh(ctx context.Context) error {
	cur := l.snap.Load()
	if cur != nil {
		v, err := l.store.Version(ctx)
		if err != nil {
			return err
		}
		if v == cur.version {
			return nil
		}
	}
	bans, v, err := l.store.List(ctx)
	if err != nil {
		return err
	}
	s := &banSnapshot{version: v, until: make(map[banKey]time.Time, len(bans))}
	now := l.clk.Now()
	for _, b := range bans {
		if b.Active(now) {
			s.until[banKey{b.User, b.Room}] = b.Until
		}
	}
	l.snap.Store(s)
	l.active.Set(float64(len(s.until)))
	return nil
}

// Run reloads every interval, and purges lapsed bans every PurgeEvery,
// until ctx is done.
func (l *BanList) Run(ctx context.Context) error {
	lastPurge := l.clk.Now()
	return reload.Every(ctx, l.every, l.log, "ingest: ban list", func(ctx context.Context) error {
		err := l.Refresh(ctx)
		if now := l.clk.Now(); l.purge > 0 && now.Sub(lastPurge) >= l.purge {
			lastPurge = now
			if n, err := l.store.Purge(ctx, now); err != nil {
				l.log.Warn("ingest: purging lapsed bans failed", "err", err)
			} else if n > 0 {
				l.log.Info("ingest: purged lapsed bans", "bans", n)
			}
		}
		return err
	})
}

// Ready reports whether the list has loaded the store at least once.
func (l *BanList) Ready() bool { return l.snap.Load() != nil }

// Banned reports whether user is banned from room now (a ban of the room
// or of every room), and counts the drop when so. It reads the snapshot
// only.
func (l *BanList) Banned(room, user string) bool {
	s := l.snap.Load()
	if s == nil || len(s.until) == 0 {
		return false
	}
	now := l.clk.Now()
	for _, k := range [2]banKey{{user, ""}, {user, room}} {
		if until, ok := s.until[k]; ok && (until.IsZero() || now.Before(until)) {
			l.banned.Inc()
			return true
		}
	}
	return false
}

// BanAPI is the operator API for bans, on gin, beside the events API:
//
//	PUT    /v1/admin/bans/{user}   body {"room": "", "until": RFC 3339 | "ttl_seconds": n, "reason": ""}
//	DELETE /v1/admin/bans/{user}?room=R
//	GET    /v1/admin/bans/{user}   → {"bans": [...]}
//	GET    /v1/admin/bans          → {"bans": [...]} (every ban in force)
//
// A ban without room covers every room; without until or ttl_seconds it
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
// with op and the route. The error's text is for the logs only: it can name
// a Redis address, a key or a driver's internals, none of which a client
// can act on.
func backendUnavailable(c *gin.Context, log *slog.Logger, msg, op string, err error) {
	if log == nil {
		log = slog.Default()
	}
	log.ErrorContext(c.Request.Context(), "ingest: backend failed", "op", op, "route", c.FullPath(), "err", err)
	e := httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "%s", msg)
	e.RetryAfter = time.Second
	httpx.Abort(c, e)
}

func (a *BanAPI) put(c *gin.Context) {
	var req BanRequest
	if c.Request.ContentLength != 0 {
		if e := httpx.BindJSON(c, maxBanBody, &req); e != nil {
			httpx.Abort(c, e)
			return
		}
	}
	now := a.now()
	// The reason is cleaned as comments are: kept, without what only a
	// terminal or a bidi algorithm would act on.
	b := Ban{User: c.Param("user"), Room: req.Room, Until: req.Until, Reason: ident.CleanText(req.Reason), At: now}
	const maxTTLSeconds = int64(maxBanTTL / time.Second)
	switch {
	case req.TTLSeconds < 0 || req.TTLSeconds > maxTTLSeconds:
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "ttl_seconds must be 1-%d (10 years), or left out with until for a ban without an end (got %d)", maxTTLSeconds, req.TTLSeconds))
		return
	case req.TTLSeconds > 0 && !req.Until.IsZero():
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "give until or ttl_seconds, not both"))
		return
	case req.TTLSeconds > 0:
		b.Until = now.Add(time.Duration(req.TTLSeconds) * time.Second)
	case !b.Until.IsZero() && (!b.Until.After(now) || b.Until.Sub(now) > maxBanTTL):
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "until must be in the future and at most 10 years ahead, or left out with ttl_seconds for a ban without an end (got %s)", b.Until.Format(time.RFC3339)))
		return
	}
	if err := b.Validate(); err != nil {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "%v", err))
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

func (a *BanAPI) delete(c *gin.Context) {
	user, room := c.Param("user"), c.Query("room")
	if room != "" && !wire.ValidRoom(room) {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_ban", "room %q: 1-64 of A-Z a-z 0-9 _ -", room))
		return
	}
	ctx := c.Request.Context()
	if err := a.Store.Delete(ctx, user, room); err != nil {
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
