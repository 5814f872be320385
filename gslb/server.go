package gslb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/ban"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/ratelimit"
	"danmaku/sdk/wire"
)

// Entry is the answer of GET /v1/entry; wire.Entry documents it.
type Entry = wire.Entry

// ServerConfig configures the entry endpoint.
type ServerConfig struct {
	// Allocator chooses addresses. Required.
	Allocator *Allocator
	// Keyring signs dynamic tokens. Required.
	Keyring *auth.Keyring
	// Tickets verifies business tickets. Required.
	Tickets *auth.TicketVerifier
	// CDN is the base URL segments are fetched from, ending in "/". Required.
	CDN string
	// PublishDelay is how long after a segment ends (store clock) it is due
	// at the CDN; it must equal the slicer's. Zero:
	// wire.DefaultPublishDelayMs.
	PublishDelay time.Duration
	// ServerClock is the clock whose time the entry answer hands clients:
	// the one that decides which segment a message belongs to (the stream
	// store's, followed by a clock.Follower), so that clients schedule
	// their polls on it. Nil: Clock.
	ServerClock clock.Clock

	// Events says which rooms exist: only a room of a live event gets an
	// entry (others: 404 no_such_room, 409 room_not_live), and the room's
	// settings there give its segment duration. Nil: every valid room name
	// is open with the defaults (tests of the allocator alone).
	Events *event.Directory
	// Bans are the operators' bans (read only: the ingest purges them): a
	// banned user's entry to the room is refused, 403 banned. Run reloads
	// them every BanReload. Nil: nobody is banned here.
	Bans ban.Store
	// BanReload is how often the bans' version is polled. Zero: 1 s.
	BanReload time.Duration
	// SegmentMs is the segment duration of rooms whose event sets none.
	// Zero: 1000.
	SegmentMs int64
	// MinProtocol is the oldest client protocol (wire.Protocol; a client
	// that sends none is 1) given an entry: older ones get 426
	// protocol_unsupported naming it. Zero: 1, every client.
	MinProtocol int
	// SyncMinProtocol is the oldest protocol whose clients are told they
	// may hold messages to their video's playhead (the entry's sync); the
	// others run in wall-clock mode. Raised during a show, it steers a
	// misbehaving SDK release back to wall-clock mode; above wire.Protocol
	// it turns sync off for everyone. Zero: 2, the first with playheads.
	SyncMinProtocol int
	// MaxInFlight bounds the entry requests being answered at once; beyond
	// it a request is answered 503 overloaded at once instead of waiting
	// for a CPU busy with the others: under a surge a queue only makes
	// every answer late, and late clients retry anyway. Zero: 128, sized
	// for a 2-core gslb: an entry takes ~20 µs of CPU (BenchmarkEntry), so
	// 128 admitted are about a millisecond of work. Negative: refused.
	MaxInFlight int
	// RateLimit applies the rate-limit rules to the entry and time routes,
	// after the MaxInFlight admission (overload stays a 503, answered before
	// anything else). Its "user" rules count the ticket's verified subject.
	// Near a rule's limit the entry is answered from the user's last
	// allocation with a stretched refresh hint (docs/api-limits.md). Nil:
	// no limits.
	RateLimit *ratelimit.Limiter
	// LastEntries is how many users' last entry answers the server keeps
	// to answer them again near a limit, without allocating or signing.
	// An answer is kept only while it can be reused (its token has half
	// its life left) and up to half a token life more: the cache holds
	// the users who entered within the last token life, never more than
	// LastEntries. Zero: 32,768 (about 40 MiB at 1.2 KiB each); negative:
	// none.
	LastEntries int
	// Registerer receives the metrics (the entry server's and the
	// allocator's). Nil: a private registry.
	Registerer prometheus.Registerer
	// Clock tells the time. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// defaultMaxInFlight: see ServerConfig.MaxInFlight.
const defaultMaxInFlight = 128

// defaultLastEntries: see ServerConfig.LastEntries.
const defaultLastEntries = 32 << 10

// Retry-After of every 503 the entry answers is drawn from [1 s, 3 s] (whole
// seconds, as the header carries), so that the clients a surge turned away
// do not all come back in the same second.
const (
	retryAfterMin = 1
	retryAfterMax = 3
)

// Server serves GET /v1/entry.
type Server struct {
	cfg      ServerConfig
	inflight atomic.Int64
	entries  *prometheus.CounterVec
	// ok and overloaded are entries' most frequent children, resolved once:
	// a surge's refusals must stay cheap.
	ok, overloaded prometheus.Counter
	// degraded counts the entries answered near a rate limit (nil: no
	// RateLimit).
	degraded prometheus.Counter
	// last holds users' last entry answers (nil: no RateLimit, or
	// LastEntries negative).
	last *lastEntries
	// limit is the rate-limit middleware (nil: none).
	limit gin.HandlerFunc
	// bans is the node's view of the bans (nil: no Bans).
	bans *ban.List
}

// NewServer checks cfg and returns a Server.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Allocator == nil || cfg.Keyring == nil || cfg.Tickets == nil {
		return nil, errors.New("gslb: server: Allocator, Keyring and Tickets are required")
	}
	if cfg.CDN == "" {
		return nil, errors.New("gslb: server: CDN is required")
	}
	if cfg.CDN[len(cfg.CDN)-1] != '/' {
		cfg.CDN += "/"
	}
	if cfg.PublishDelay == 0 {
		cfg.PublishDelay = wire.DefaultPublishDelayMs * time.Millisecond
	}
	if cfg.SegmentMs == 0 {
		cfg.SegmentMs = wire.SegmentDuration
	}
	if !wire.ValidSegmentMs(cfg.SegmentMs) {
		return nil, fmt.Errorf("gslb: server: SegmentMs %d is not 1000, 500 or 250", cfg.SegmentMs)
	}
	if cfg.MinProtocol == 0 {
		cfg.MinProtocol = defaultMinProtocol
	}
	if cfg.SyncMinProtocol == 0 {
		cfg.SyncMinProtocol = defaultSyncMinProtocol
	}
	if cfg.MinProtocol < 1 || cfg.MinProtocol > wire.Protocol || cfg.SyncMinProtocol < 1 {
		return nil, fmt.Errorf("gslb: server: MinProtocol %d must be 1-%d (this build's protocol), SyncMinProtocol %d at least 1", cfg.MinProtocol, wire.Protocol, cfg.SyncMinProtocol)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = defaultMaxInFlight
	}
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("gslb: server: MaxInFlight %d is negative", cfg.MaxInFlight)
	}
	if cfg.LastEntries == 0 {
		cfg.LastEntries = defaultLastEntries
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.ServerClock == nil {
		cfg.ServerClock = cfg.Clock
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg}
	s.entries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_gslb_entries_total",
		Help: "Entry requests by HTTP status and code (ok or the error code).",
	}, []string{"status", "code"})
	s.ok = s.entries.WithLabelValues("200", "ok")
	s.overloaded = s.entries.WithLabelValues("503", codeOverloaded)
	if cfg.RateLimit != nil {
		s.limit = cfg.RateLimit.Handler(s.identify)
		s.degraded = s.entries.WithLabelValues("200", codeDegraded)
		if cfg.LastEntries > 0 {
			s.last = newLastEntries(cfg.LastEntries, cfg.Keyring.TokenTTL()/2, cfg.Clock)
		}
	}
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "danmaku_gslb_entry_inflight",
		Help: "Entry requests being answered; at MaxInFlight new ones get 503 overloaded.",
	}, func() float64 { return float64(s.inflight.Load()) })
	for _, c := range []prometheus.Collector{s.entries, inflight, cfg.Allocator.Collector()} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("gslb: server: metrics: %w", err)
		}
	}
	if cfg.Bans != nil {
		// Refusals are counted by the entries metric (403 banned).
		active := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "danmaku_gslb_bans",
			Help: "Bans in this node's snapshot (the entry refuses the users they cover).",
		})
		if err := cfg.Registerer.Register(active); err != nil {
			return nil, fmt.Errorf("gslb: server: metrics: %w", err)
		}
		bl := ban.ListConfig{
			Store: cfg.Bans, What: "gslb: ban list", Reload: cfg.BanReload, PurgeEvery: -1,
			Clock: cfg.Clock, Active: active, Logger: cfg.Logger,
		}
		if cfg.Events != nil {
			bl.EventOf = cfg.Events.EventOf
		}
		var err error
		if s.bans, err = ban.NewList(bl); err != nil {
			return nil, fmt.Errorf("gslb: server: %w", err)
		}
	}
	return s, nil
}

// Run reloads the bans every BanReload until ctx is done (it returns at
// once without Bans).
func (s *Server) Run(ctx context.Context) error {
	if s.bans == nil {
		return nil
	}
	return s.bans.Run(ctx)
}

// RefreshBans reloads the bans now: an operator API in the same process
// calls it after a write.
func (s *Server) RefreshBans(ctx context.Context) error {
	if s.bans == nil {
		return nil
	}
	return s.bans.Refresh(ctx)
}

// Codes of the entry's 503s that the allocator and the admission limit
// decide (docs/api.md).
const (
	codeOverloaded = "overloaded"
	codeNoNodes    = "no_nodes"
	codeTableStale = "table_stale"
	// codeBanned: an operator banned the ticket's user from the room (or
	// from every room).
	codeBanned = "banned"
	// codeDegraded labels the 200s answered near a rate limit.
	codeDegraded = "degraded"
)

// TimePath answers the store clock's time, for clients refining their
// clock offset after a join whose round trip was long (a busy gslb at show
// start): {"server_time_ms": N}. It needs no ticket and costs no backend
// call.
const TimePath = "/v1/time"

// BrowserRoutes are the routes a page calls (the web SDK: its entry and
// its clock samples): the only ones the gslb grants CORS
// (httpx.EngineConfig.CORSRoutes). The events API is an operator's.
var BrowserRoutes = []string{"/v1/entry", TimePath}

// Register adds the entry and time routes to r: admission first, then
// the rate limits, then the handler.
func (s *Server) Register(r gin.IRoutes) {
	if s.limit == nil {
		r.GET("/v1/entry", s.admit, s.entry)
		r.GET(TimePath, s.time)
		return
	}
	r.GET("/v1/entry", s.admit, s.limit, s.entry)
	r.GET(TimePath, s.limit, s.time)
}

func (s *Server) time(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"server_time_ms": s.cfg.ServerClock.Now().UnixMilli()})
}

// fail answers e, counted. Every 503 gets a jittered Retry-After.
func (s *Server) fail(c *gin.Context, e *httpx.Error) {
	if e.Status == http.StatusServiceUnavailable {
		jittered := *e // e may be shared (the event directory's)
		jittered.RetryAfter = retryAfter()
		e = &jittered
	}
	s.entries.WithLabelValues(strconv.Itoa(e.Status), e.Code).Inc()
	httpx.Abort(c, e)
}

func retryAfter() time.Duration {
	return time.Duration(retryAfterMin+rand.IntN(retryAfterMax-retryAfterMin+1)) * time.Second
}

// overloadedAnswer is the answer beyond MaxInFlight; built once, since it
// is what a surge gets most of.
var overloadedAnswer = httpx.Errorf(http.StatusServiceUnavailable, codeOverloaded, "too many entry requests; retry after the Retry-After delay")

// admit bounds the entries answered at once. It runs first: beyond the
// bound the answer costs an atomic add and a small write, whatever the
// request holds, and a whole-server overload stays a 503 (a rate limit is
// a client's 429).
func (s *Server) admit(c *gin.Context) {
	if s.inflight.Add(1) > int64(s.cfg.MaxInFlight) {
		s.inflight.Add(-1)
		s.overloaded.Inc()
		e := *overloadedAnswer
		e.RetryAfter = retryAfter()
		httpx.Abort(c, &e)
		return
	}
	defer s.inflight.Add(-1)
	c.Next()
}

// verifiedKey is where identify leaves the ticket it verified, so that
// the entry does not verify it twice.
const verifiedKey = "danmaku.gslb.ticket"

type verified struct {
	t   *auth.Ticket
	err error
}

// verifyTicket verifies the request's ticket once per request.
func (s *Server) verifyTicket(c *gin.Context, ticket string) (*auth.Ticket, error) {
	if v, ok := c.Get(verifiedKey); ok {
		vt := v.(verified)
		return vt.t, vt.err
	}
	t, err := s.cfg.Tickets.Verify(ticket)
	c.Set(verifiedKey, verified{t, err})
	return t, err
}

// identify is the rate limiter's user: the subject of a ticket that
// verifies. A request without one is left to the entry, which refuses it.
func (s *Server) identify(c *gin.Context) ratelimit.Identity {
	ticket := httpx.BearerToken(c, "")
	if ticket == "" {
		return ratelimit.Identity{}
	}
	t, err := s.verifyTicket(c, ticket)
	if err != nil {
		return ratelimit.Identity{}
	}
	return ratelimit.Identity{User: t.Subject}
}

func (s *Server) entry(c *gin.Context) {
	// A ticket in the URL is written to access logs, proxies' logs and
	// browser history: refused, before anything else, so that a client
	// that sends one learns at once rather than after the room checks.
	if _, ok := c.GetQuery("ticket"); ok {
		s.fail(c, httpx.Errorf(http.StatusBadRequest, "ticket_in_query", "send the ticket as Authorization: Bearer TICKET, never in the URL"))
		return
	}
	room := c.Query("room")
	if !wire.ValidRoom(room) {
		s.fail(c, httpx.Errorf(http.StatusBadRequest, "bad_room", "room must be 1-64 characters of A-Z a-z 0-9 _ -"))
		return
	}
	segmentMs := s.cfg.SegmentMs
	var eventID string
	scopeRequired := false
	if s.cfg.Events != nil {
		// Before the ticket: an unknown room costs nothing but a map read.
		if err := s.cfg.Events.Check(room); err != nil {
			s.fail(c, event.RoomHTTPError(err))
			return
		}
		v, _ := s.cfg.Events.Lookup(room)
		if v.Room.SegmentMs != 0 {
			segmentMs = v.Room.SegmentMs
		}
		if v.Event != nil {
			eventID = v.Event.ID
		}
		scopeRequired = v.ScopeRequired()
	}
	shape := answerShape{segmentMs: segmentMs}
	proto, e := s.protocol(c)
	if e != nil {
		s.fail(c, e)
		return
	}
	shape.sync = proto >= s.cfg.SyncMinProtocol
	ticket := httpx.BearerToken(c, "")
	if ticket == "" {
		s.fail(c, httpx.Errorf(http.StatusUnauthorized, "no_ticket", "a business ticket is required (Authorization: Bearer TICKET)"))
		return
	}
	t, err := s.verifyTicket(c, ticket)
	if err != nil {
		s.fail(c, ticketRefused(err))
		return
	}
	// Scope: a paid room takes only tickets that name their rooms or
	// event; a scoped ticket enters only what it names. Host and admin
	// hold only there: elsewhere, and for an unscoped ticket, the token is
	// a viewer's, which the ingest and edge check against the token's room.
	if scopeRequired && !t.Scoped() {
		s.fail(c, httpx.Errorf(http.StatusForbidden, "ticket_scope_required", "room %s admits only tickets that name their rooms or event", room))
		return
	}
	if !t.Admits(room, eventID) {
		s.fail(c, httpx.Errorf(http.StatusForbidden, "ticket_scope", "the ticket does not admit room %s", room))
		return
	}
	t.Role = t.RoleIn(room, eventID) // t is this request's own
	// Before the last answer is reused: a ban refuses that too.
	if s.bans != nil && s.bans.Banned(room, t.Subject) {
		s.fail(c, httpx.Errorf(http.StatusForbidden, codeBanned, "banned from this room"))
		return
	}
	_, near := ratelimit.Near(c)
	if near && s.answerLast(c, t, room, shape) {
		return
	}
	ip, _ := netip.ParseAddr(c.ClientIP())
	alloc, err := s.cfg.Allocator.Allocate(t.Subject, ip)
	switch {
	case errors.Is(err, ErrTableStale):
		s.fail(c, httpx.Errorf(http.StatusServiceUnavailable, codeTableStale, "node loads are out of date; retry shortly"))
		return
	case err != nil:
		s.fail(c, httpx.Errorf(http.StatusServiceUnavailable, codeNoNodes, "no healthy node; retry shortly"))
		return
	}
	last, e := s.sign(t, room, alloc)
	if e != nil {
		s.fail(c, e)
		return
	}
	if s.last != nil {
		s.last.put(t.Subject, room, last)
	}
	if near && s.degraded != nil {
		s.degraded.Inc()
	} else {
		s.ok.Inc()
	}
	s.answer(c, t, room, shape, last, near)
}

// ticketRefused is the answer to a ticket verifyTicket refused.
func ticketRefused(err error) *httpx.Error {
	// A ticket that verifies but breaks an identity rule is the login
	// service's to fix: say which claim, and that retrying will not help.
	var ce *auth.ClaimError
	if errors.As(err, &ce) {
		return httpx.Errorf(http.StatusBadRequest, "bad_ticket_claim", "ticket claim %q: %s", ce.Claim, ce.Reason)
	}
	if errors.Is(err, auth.ErrTicketLifetime) {
		return httpx.Errorf(http.StatusUnauthorized, "ticket_lifetime", "the ticket lives longer than this deployment accepts; the login service must issue shorter-lived tickets")
	}
	return httpx.Errorf(http.StatusUnauthorized, "bad_ticket", "ticket rejected")
}

// sign issues the token of t's user in room, on the nodes alloc chose.
func (s *Server) sign(t *auth.Ticket, room string, alloc Allocation) (*lastEntry, *httpx.Error) {
	now := s.cfg.Clock.Now()
	// Ingests tells the ingest nodes which addresses are theirs, primary
	// first: a fallback takes the user's barrage only while the primary is
	// not live (ingest.Binding), so the user has one bucket.
	addrs, ingests := alloc.Addrs()
	tok, exp, err := s.cfg.Keyring.Sign(auth.Claims{
		Room:             room,
		Nick:             wire.TruncateRunes(t.Nick, wire.MaxNickRunes),
		Avatar:           t.Avatar,
		Role:             t.Role,
		Addrs:            addrs,
		Ingests:          ingests,
		Login:            now.UnixMilli(),
		RegisteredClaims: jwt.RegisteredClaims{Subject: t.Subject},
	})
	if errors.Is(err, auth.ErrTokenTooLarge) {
		return nil, httpx.Errorf(http.StatusBadRequest, "token_too_large", "the ticket's identity makes a token no node accepts; shorten the nickname or avatar")
	}
	if err != nil {
		return nil, httpx.Errorf(http.StatusServiceUnavailable, "token_unavailable", "token secrets not loaded yet; retry shortly")
	}
	return &lastEntry{
		ingest: alloc.Ingest, edge: alloc.Edge, token: tok, exp: exp,
		role: t.Role, nick: t.Nick, avatar: t.Avatar,
	}, nil
}

// answerLast answers an entry near a rate limit from the user's last
// answer in the room, if the server holds one whose token has at least
// half its life left and was signed for the same identity: no allocation
// and no signature, the two costs of an entry. The client keeps its nodes
// (a user's ingest bucket stays where it is) and its refresh hint is
// stretched. It reports whether it answered.
func (s *Server) answerLast(c *gin.Context, t *auth.Ticket, room string, shape answerShape) bool {
	if s.last == nil {
		return false
	}
	last := s.last.get(t.Subject, room)
	now := s.cfg.Clock.Now()
	if last == nil || last.role != t.Role || last.nick != t.Nick || last.avatar != t.Avatar ||
		last.exp.Sub(now) < s.cfg.Keyring.TokenTTL()/2 {
		return false
	}
	s.degraded.Inc()
	s.answer(c, t, room, shape, last, true)
	return true
}

// Refresh hints (RefreshMs of the answer): when the client should fetch
// its next entry, in a share of the token's remaining life. Normally the
// SDK's own 80 %; near a limit later, 90-95 % drawn at random, so that a
// crowd answered near a limit in one second does not come back in one
// second, and comes back less often.
const (
	refreshShare          = 0.8
	degradedRefreshShare  = 0.9
	degradedRefreshSpread = 0.05
)

// answer writes the entry answer for last.
func (s *Server) answer(c *gin.Context, t *auth.Ticket, room string, shape answerShape, last *lastEntry, degraded bool) {
	serverNow := s.cfg.ServerClock.Now()
	answer := Entry{
		Room:           room,
		User:           t.Subject,
		Role:           t.Role,
		Ingest:         last.ingest,
		Edge:           last.edge,
		CDN:            s.cfg.CDN,
		Token:          last.token,
		TokenExpiresMs: last.exp.UnixMilli(),
		ServerTimeMs:   serverNow.UnixMilli(),
		SegmentMs:      shape.segmentMs,
		PublishDelayMs: s.cfg.PublishDelay.Milliseconds(),
		Sync:           shape.sync,
	}
	// The refresh hint and the degraded flag come with rate limits only:
	// without them the client's own rule is the gslb's.
	if s.limit != nil {
		life := max(0, last.exp.Sub(s.cfg.Clock.Now()))
		share := refreshShare
		if degraded {
			share = degradedRefreshShare + rand.Float64()*degradedRefreshSpread
		}
		answer.RefreshMs = time.Duration(float64(life) * share).Milliseconds()
		answer.Degraded = degraded
	}
	// Built by hand into a pooled buffer: encoding/json's reflection was a
	// tenth of an entry's CPU beside the signature.
	buf := answerBufs.Get().(*[]byte)
	b := answer.AppendJSON((*buf)[:0])
	*buf = b
	c.Data(http.StatusOK, "application/json; charset=utf-8", *buf)
	if cap(*buf) <= maxPooledAnswer {
		answerBufs.Put(buf)
	}
}

// answerBufs holds the entry answers' buffers; an answer is about 1 KB.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// maxPooledAnswer: a buffer grown past it (a huge identity) is not kept.
const maxPooledAnswer = 16 << 10

// lastEntry is what a user's entry answer in a room was built from.
type lastEntry struct {
	ingest, edge []string
	token        string
	exp          time.Time
	// role, nick and avatar are the ticket's when the token was signed: a
	// ticket saying otherwise gets a new token.
	role, nick, avatar string
}

// lastEntries holds users' last entry answers, at most max, sharded. A
// full shard forgets an arbitrary entry: near a limit a missing one costs
// a normal entry, nothing more.
//
// An answer is reused only while its token has half its life left (keep),
// so each shard keeps two generations and rotates them every keep: an
// answer put in the current one moves to the previous at the next
// rotation and is dropped at the one after, at least keep after it was
// put (never while it can be reused) and about a token life at most. The
// cache holds the users who entered within the last token life: without
// the rotation it held every user that ever entered, up to max (a 10-minute
// soak's token refresh raised the gslbs' heap by the users new to each, and
// a show's churn would have filled it to max, ~40 MiB, with dead tokens).
type lastEntries struct {
	perShard int
	keep     time.Duration
	clock    clock.Clock
	shards   [lastShards]lastShard
}

const lastShards = 32

type lastShard struct {
	mu sync.Mutex
	// cur holds the answers put since rotated, prev those of the
	// generation before.
	cur, prev map[string]*lastEntry
	rotated   time.Time
}

func newLastEntries(max int, keep time.Duration, clk clock.Clock) *lastEntries {
	l := &lastEntries{perShard: (max + lastShards - 1) / lastShards, keep: keep, clock: clock.Or(clk)}
	now := l.clock.Now()
	for i := range l.shards {
		l.shards[i].cur, l.shards[i].prev = map[string]*lastEntry{}, map[string]*lastEntry{}
		l.shards[i].rotated = now
	}
	return l
}

func lastKey(user, room string) string { return user + "\x00" + room }

func (l *lastEntries) shard(key string) *lastShard {
	return &l.shards[mix(hash64(key))%lastShards]
}

// rotate moves sh's generations on if keep has passed since the last
// rotation (both, if twice keep has: nothing in either can be reused). The
// caller holds sh.mu.
func (l *lastEntries) rotate(sh *lastShard, now time.Time) {
	age := now.Sub(sh.rotated)
	if age < l.keep {
		return
	}
	// New maps, not cleared ones: a map keeps the table of its largest
	// size, and a burst's would stay.
	sh.prev, sh.cur = sh.cur, map[string]*lastEntry{}
	if age >= 2*l.keep {
		sh.prev = map[string]*lastEntry{}
	}
	sh.rotated = now
}

func (l *lastEntries) get(user, room string) *lastEntry {
	k := lastKey(user, room)
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l.rotate(sh, l.clock.Now())
	if e, ok := sh.cur[k]; ok {
		return e
	}
	return sh.prev[k]
}

func (l *lastEntries) put(user, room string, e *lastEntry) {
	k := lastKey(user, room)
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l.rotate(sh, l.clock.Now())
	delete(sh.prev, k)
	if _, ok := sh.cur[k]; !ok && len(sh.cur)+len(sh.prev) >= l.perShard {
		from := sh.prev
		if len(from) == 0 {
			from = sh.cur
		}
		for old := range from {
			delete(from, old)
			break
		}
	}
	sh.cur[k] = e
}

// len is how many answers l holds.
func (l *lastEntries) len() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.cur) + len(sh.prev)
		sh.mu.Unlock()
	}
	return n
}
