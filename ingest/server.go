package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/bucket"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/internal/ratelimit"
	"danmaku/internal/rules"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Defaults. The user and room bucket figures are the published "reservoir"
// practice of large live platforms (its second layer).
const (
	defaultUserCapacity  = 3
	defaultUserRefill    = 1 / 1.5 // tokens per second: one per 1.5 s
	defaultRoomBase      = 200
	defaultRoomPerViewer = 1.0 / 8
	defaultRoomCeiling   = 20000
	defaultRoomRefill    = 1200
	defaultMaxTextRunes  = 60
	defaultMaxBody       = 4 << 10
	defaultOnlineSync    = time.Second
	onlineStale          = 5 * time.Second
	defaultReport        = 5 * time.Millisecond
)

// Config configures an ingest node.
type Config struct {
	// Streams receives accepted messages. Required.
	Streams stream.Store
	// Keyring verifies dynamic tokens. Required.
	Keyring *auth.Keyring
	// TokenCache is how many verified tokens the node keeps, so that a
	// user's comments do not decode the same token again (most of what
	// verifying costs). Zero: auth.DefaultTokenCacheSize; negative: none.
	TokenCache int
	// Addr is this node's advertised address; tokens not issued for it are
	// refused. Empty: the address binding is not checked (single node).
	Addr string
	// BindingStale is how long after its newest load report a user's
	// primary ingest node (the token's first ingest address) counts as
	// live; while it does, this node refuses the user's barrage as a
	// fallback (421 not_primary), so the user has one bucket. Zero: 3 s.
	BindingStale time.Duration
	// NodeID identifies this node in the load table. Empty: Addr.
	NodeID string
	// Line is the ISP line this node serves ("" = BGP).
	Line string
	// Region is where the node stands, reported to the gslb. Empty: unknown.
	Region string
	// Load is the load table: the node reports itself there, and learns
	// from it which ingest and edge nodes are alive. Nil: no reports, and
	// rooms are sized as if empty.
	Load loadtable.Table
	// Online holds the edges' per-room online counts, which size the room
	// buckets. Nil: Load, when it is also an OnlineTable (both tables of
	// package gslb are).
	Online loadtable.OnlineTable
	// Gate is the room bucket shared across ingest nodes and the barrage
	// append behind it, taken once per room and write-behind window. Nil:
	// a MemoryRoomGate over Streams.
	Gate RoomGate
	// FlushWindow is how long a room's comments gather before one Flush
	// takes them to the Gate. Zero: 150 ms.
	FlushWindow time.Duration
	// Hold is how long a comment admitted while the Gate is unreachable
	// waits for it before it is answered 503. Zero: 15 s.
	Hold time.Duration
	// FastLane displays announcements and lottery entries under a per-room
	// cap, global across ingest nodes. Nil: a MemoryFastLane over Streams.
	FastLane FastLane
	// FastLaneCap is how many fast-lane messages a room displays per
	// second, unless its event's limits say otherwise. Zero: 30.
	FastLaneCap int
	// Lotteries keeps the lotteries viewers enter by typing a keyword. Nil:
	// none (keywords are ordinary comments).
	Lotteries LotteryStore
	// Takedowns keeps the rooms' takedowns (TakeDown). Nil: in memory.
	Takedowns TakedownStore
	// Bans keeps the operators' bans. Nil: in memory.
	Bans BanStore
	// Reports keeps the viewers' reports of comments. Nil: in memory.
	Reports ReportStore
	// ReportBurst and ReportEvery are a viewer's report allowance: a
	// bucket of ReportBurst reports refilled one every ReportEvery, kept
	// per user on the user's primary node (exact, like the comment
	// bucket). Zero: 5 and 12 s.
	ReportBurst float64
	ReportEvery time.Duration
	// Words is the sensitive-word list, reloaded at run time. Nil: none.
	Words WordSource
	// WordPolicy is what a listed word does to a comment unless the room's
	// event says otherwise, until a moderation document is pushed to
	// ModerationRules. Zero: mask.
	WordPolicy WordPolicy
	// DuplicateWindow is how long a text suppresses copies of itself in a
	// room unless its event says otherwise, until a moderation document
	// is pushed to ModerationRules. Zero: 10 s.
	DuplicateWindow time.Duration
	// ModerationRules is the rules store whose rules.KindModeration
	// documents, once one is pushed, replace WordPolicy and
	// DuplicateWindow on every node within a second (ParseModeration).
	// Nil: those two fields, always.
	ModerationRules rules.Store
	// BroadcastGiftValue is the total value (Value × max(Count, 1)) from
	// which a gift is also announced site-wide: a system message every live
	// room shows ("X sent 10×rocket in R"), at most 5 a second per node.
	// Zero: never.
	BroadcastGiftValue int64
	// Global is the event-wide bucket shared by every ingest node (the
	// rate is the event's event_refill; none without it). Nil: in memory.
	Global GlobalLimiter
	// Audit records every comment that passes the gateway with what became
	// of it. Nil: a recorder keeping its objects in memory (tests), which
	// the Server runs and shuts down; a deployment gives one writing to its
	// audit store, shared with the process's slicer, and runs it itself
	// (Run, then Shutdown once every role has stopped). Always on.
	Audit *audit.Recorder
	// GiftBacklog is where the slicer of this process publishes each
	// room's gift backlog, for the default memory gift log to refuse new
	// gifts over the room's bound. Nil: no bound (a gift log given in
	// Gifts reads its own).
	GiftBacklog GiftBacklog
	// Gifts appends gifts exactly once per order id. Nil: a MemoryGiftLog
	// over Streams (which must then be a *stream.MemoryStore) with its
	// default order TTL of 24 h.
	Gifts GiftLog
	// GiftKeys are the bearer keys business servers use for the gift API.
	// Empty: the gift API answers 401 bad_service_key to everyone.
	GiftKeys []string
	// AnnounceKeys are the bearer keys business servers use to post system
	// announcements to a room (role "ops"), beside hosts and admins with
	// their tickets. Empty: only tickets announce.
	AnnounceKeys []string
	// Events says which rooms take messages: only rooms of a live event
	// (others: 404 no_such_room, 409 room_not_live). Nil: every room (tests
	// of the upload path alone).
	Events *event.Directory
	// UserCapacity and UserRefill size the per-user bucket. Zero: 3 tokens,
	// one every 1.5 s.
	UserCapacity float64
	UserRefill   float64
	// RoomBase, RoomPerViewer and RoomCeiling size the room bucket:
	// min(online*RoomPerViewer + RoomBase, RoomCeiling). Zero: 200, 1/8, 20000.
	RoomBase      float64
	RoomPerViewer float64
	RoomCeiling   float64
	// RoomRefill is the room bucket's refill per second. Zero: 1200.
	RoomRefill float64
	// MaxTextRunes is the longest comment accepted after normalisation.
	// Zero: 60.
	MaxTextRunes int
	// MaxBody bounds request bodies in bytes. Zero: 4 KiB.
	MaxBody int64
	// PlayheadAhead and PlayheadBehind bound a message's playhead_ms around
	// this node's clock (ingest/playhead.go). Zero: 2 s and 2 minutes.
	PlayheadAhead  time.Duration
	PlayheadBehind time.Duration
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Clock tells the time. Nil: real clock. When it makes timers
	// (clock.TimersOf: a clock.Fake) the node's tickers and retry waits run
	// on it too; the comment writer's flushes run on FlushClock.
	Clock clock.Clock
	// FlushClock times the comment writer: its flush window, hold and
	// retries (ingest/writer.go). Nil: the real clock, even when Clock is
	// a Fake, so that a test faking Clock for buckets and epochs still has
	// its comments flushed; the writer's own tests fake this one.
	FlushClock clock.Timers
	// CPU returns the node's CPU use, 0..1, for its load reports (the
	// allocator stops handing out a node past its CPU bound). Nil: 0.
	CPU func() float64
	// MaxInFlight is the in-flight requests the node is sized for, reported
	// as its capacity so the allocator hands it out by headroom. Zero:
	// unlimited.
	MaxInFlight int
	// RateLimit applies the rate-limit rules to the upload routes (and,
	// through RateLimitHandler, to the operator APIs beside them); its
	// "user" rules count the dynamic token's verified user. Nil: no limits
	// beyond the buckets above.
	RateLimit *ratelimit.Limiter
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Server is an ingest node. It is safe for concurrent use.
type Server struct {
	cfg   Config
	users *bucket.Keyed
	// tokens verifies dynamic tokens: the Keyring, behind a TokenCache
	// unless Config.TokenCache is negative.
	tokens auth.Verifier
	// binding keeps a user's barrage on the user's primary ingest node.
	binding *Binding

	giftCast *giftBroadcaster // nil: BroadcastGiftValue unset
	online   atomic.Pointer[map[string]int]
	view     *loadtable.View // of cfg.Load; syncOnline's only
	inflight atomic.Int64
	// ingestNodes is how many ingest nodes reported live in the last load
	// snapshot (0 before the first): they share each room's limit.
	ingestNodes atomic.Int64
	// ingestRank is this node's place among them, by node id.
	ingestRank atomic.Int64
	writer     *writer
	lotteries  *Lotteries
	bans       *BanList
	words      *WordFilter
	mod        *ModerationSettings
	dups       *Duplicates
	global     *GlobalGate
	audit      *audit.Recorder
	ownAudit   bool // made here: Run runs and shuts it down

	rejected  *prometheus.CounterVec
	accepted  *prometheus.CounterVec
	overflows *prometheus.CounterVec
	// giftAnswers counts the gift API's answers by HTTP status, so that
	// its 5xx — a business server's paid order not taken — is told apart
	// from the uploads' (rejected's backend layer holds both).
	giftAnswers *prometheus.CounterVec
	// takedowns counts the takedowns made through this node.
	takedowns prometheus.Counter

	// limit is Config.RateLimit's middleware (nil: none).
	limit gin.HandlerFunc

	// reportBucket holds each user's report allowance.
	reportBucket *bucket.Keyed
	reportCounts *prometheus.CounterVec
}

// New checks cfg, applies defaults and returns a Server. It starts nothing.
func New(cfg Config) (*Server, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, users: bucket.NewKeyed(cfg.UserCapacity, cfg.UserRefill), tokens: cfg.Keyring, binding: NewBinding(cfg.Addr, cfg.BindingStale)}
	var tokenMetrics []prometheus.Collector
	if cfg.TokenCache >= 0 {
		tc, err := auth.NewTokenCache(auth.TokenCacheConfig{Keyring: cfg.Keyring, Capacity: cfg.TokenCache})
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		s.tokens = tc
		tokenMetrics = tokenCacheMetrics(tc)
	}
	if b, ok := cfg.Gifts.(interface{ SetBacklogBound(func(string) float64) }); ok {
		// The bound follows the event's room limits, changed at run time.
		b.SetBacklogBound(s.giftBacklogBound)
	}
	s.writer = newWriter(cfg.Gate, cfg.NodeID, cfg.FlushWindow, cfg.Hold, cfg.Clock, cfg.FlushClock, cfg.Logger, s.liveIngestNodes, s.flushPhase)
	if err := s.antiSpam(); err != nil {
		return nil, err
	}
	if cfg.Lotteries != nil {
		var err error
		s.lotteries, err = NewLotteries(LotteriesConfig{
			Store: cfg.Lotteries, FastLane: cfg.FastLane, DisplayCap: cfg.FastLaneCap, CapOf: s.fastLaneCap,
			Clock: cfg.Clock, Registerer: cfg.Registerer, Logger: cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
	}
	empty := map[string]int{}
	s.online.Store(&empty)
	if cfg.BroadcastGiftValue > 0 {
		s.giftCast = &giftBroadcaster{
			streams: cfg.Streams, min: cfg.BroadcastGiftValue,
			bucket:  newRateBucket(giftBroadcastRate, giftBroadcastBurst, cfg.Clock),
			counter: siteBroadcastCounter(cfg.Registerer),
		}
	}
	if cfg.Load != nil {
		// Read once a second: a missed log entry is superseded by the
		// node's next report within 250 ms, so only the periodic whole
		// reads, not every read, need to be whole.
		s.view = loadtable.NewView(cfg.Load)
		s.view.WholeAfterGap = 2 * defaultOnlineSync
	}
	if err := s.registerMetrics(tokenMetrics); err != nil {
		return nil, err
	}
	s.reportBucket = bucket.NewKeyed(cfg.ReportBurst, 1/cfg.ReportEvery.Seconds())
	reportCounts, err := reportMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("ingest: metrics: %w", err)
	}
	s.reportCounts = reportCounts
	if cfg.RateLimit != nil {
		s.limit = cfg.RateLimit.Handler(s.limitIdentity)
	}
	return s, nil
}

// withDefaults checks c and fills its zero fields.
func (c *Config) withDefaults() error {
	if c.Streams == nil || c.Keyring == nil {
		return errors.New("ingest: Streams and Keyring are required")
	}
	c.Clock = clock.Or(c.Clock)
	if c.NodeID == "" {
		c.NodeID = c.Addr
	}
	if c.Gate == nil {
		c.Gate = NewMemoryRoomGate(c.Streams, c.Clock)
	}
	if c.FlushWindow == 0 {
		c.FlushWindow = defaultWindow
	}
	if c.Hold == 0 {
		c.Hold = defaultHold
	}
	if c.FlushWindow < 0 || c.Hold < 0 || c.BroadcastGiftValue < 0 {
		return errors.New("ingest: FlushWindow, Hold and BroadcastGiftValue must not be negative")
	}
	if c.FastLane == nil {
		c.FastLane = NewMemoryFastLane(c.Streams, c.Clock)
	}
	if c.Takedowns == nil {
		c.Takedowns = NewMemoryTakedownStore(c.Clock)
	}
	if c.FastLaneCap == 0 {
		c.FastLaneCap = defaultFastLaneCap
	}
	if c.FastLaneCap < 1 || c.FastLaneCap > maxFastLaneCap {
		return fmt.Errorf("ingest: FastLaneCap must be 1-%d", maxFastLaneCap)
	}
	if c.Gifts == nil {
		// Gifts must land in the stream the slicer and edge read; only an
		// in-process store can be paired with a gift log here.
		mem, ok := c.Streams.(*stream.MemoryStore)
		if !ok {
			return fmt.Errorf("ingest: Gifts is required with a %T stream store", c.Streams)
		}
		g, err := NewMemoryGiftLog(MemoryGiftLogConfig{Streams: mem, Backlog: c.GiftBacklog, Clock: c.Clock})
		if err != nil {
			return err
		}
		c.Gifts = g
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.UserCapacity, defaultUserCapacity)
	def(&c.UserRefill, defaultUserRefill)
	def(&c.RoomBase, defaultRoomBase)
	def(&c.RoomPerViewer, defaultRoomPerViewer)
	def(&c.RoomCeiling, defaultRoomCeiling)
	def(&c.RoomRefill, defaultRoomRefill)
	if c.Reports == nil {
		c.Reports = NewMemoryReportStore(ReportBounds{}, c.Clock)
	}
	if c.ReportBurst == 0 {
		c.ReportBurst = defaultReportBurst
	}
	if c.ReportEvery == 0 {
		c.ReportEvery = defaultReportEvery
	}
	if c.ReportBurst < 1 || c.ReportEvery <= 0 {
		return errors.New("ingest: ReportBurst must be at least 1 and ReportEvery positive")
	}
	if c.MaxTextRunes == 0 {
		c.MaxTextRunes = defaultMaxTextRunes
	}
	if c.MaxBody == 0 {
		c.MaxBody = defaultMaxBody
	}
	if c.PlayheadAhead == 0 {
		c.PlayheadAhead = defaultPlayheadAhead
	}
	if c.PlayheadBehind == 0 {
		c.PlayheadBehind = defaultPlayheadBehind
	}
	if c.PlayheadAhead < 0 || c.PlayheadBehind < 0 {
		return errors.New("ingest: PlayheadAhead and PlayheadBehind must not be negative")
	}
	if c.UserCapacity < 1 || c.UserRefill <= 0 || c.RoomBase < 1 || c.RoomRefill <= 0 || c.RoomCeiling < c.RoomBase {
		return errors.New("ingest: bucket sizes must be positive and RoomCeiling >= RoomBase")
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// tokenCacheMetrics are the verified-token cache's counters and size
// (written out: the metric hygiene test reads each name as a literal).
func tokenCacheMetrics(tc *auth.TokenCache) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "danmaku_ingest_token_cache_hits_total",
			Help: "Dynamic tokens answered from the verified-token cache.",
		}, func() float64 { return float64(tc.Stats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "danmaku_ingest_token_cache_misses_total",
			Help: "Dynamic tokens the verified-token cache did not hold (verified by the keyring).",
		}, func() float64 { return float64(tc.Stats().Misses) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "danmaku_ingest_token_cache_evictions_total",
			Help: "Unexpired verified tokens evicted from the full cache, those least recently used first (a token a sender has replaced is the usual victim): the cache is too small for the tokens in use when this climbs with the misses.",
		}, func() float64 { return float64(tc.Stats().Evictions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "danmaku_ingest_token_cache_expired_total",
			Help: "Verified tokens forgotten after their expiry, their slots reused: the cache's normal turnover.",
		}, func() float64 { return float64(tc.Stats().Expired) }),
		// What the cache holds grows with the senders a node serves (about
		// 1.6 KiB a token): a gauge to read against the node's memory.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "danmaku_ingest_token_cache_tokens",
			Help: "Verified tokens the cache holds now (about 1.6 KiB each): those presented within a token's life, at most the cache's capacity.",
		}, func() float64 { return float64(tc.Stats().Len) }),
	}
}

// registerMetrics makes the server's counters and registers them with the
// writer's and extra.
func (s *Server) registerMetrics(extra []prometheus.Collector) error {
	s.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_rejected_total",
		Help: "Uploads not stored, by layer (auth, input, room, antispam, gateway, gift, backend, client), reason, event and room (other: a room no event names, or not known yet). Silent drops count here too.",
	}, []string{"layer", "reason", "event", "room"})
	s.accepted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_accepted_total",
		Help: "Messages appended to a room stream, by kind, event and room.",
	}, []string{"kind", "event", "room"})
	s.overflows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_bucket_overflow_total",
		Help: "Token bucket overflows (requests finding the bucket empty), by bucket.",
	}, []string{"bucket"})
	s.giftAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_gift_answers_total",
		Help: "Answers of the gift API (POST /v1/gifts), by HTTP status: its 5xx are paid orders the business server must retry.",
	}, []string{"status"})
	s.takedowns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_takedowns_total",
		Help: "Messages taken down through this node (a repeat of a takedown is not counted).",
	})
	for _, c := range append(append([]prometheus.Collector{s.rejected, s.accepted, s.overflows, s.giftAnswers, s.takedowns}, s.writer.m.collectors()...), extra...) {
		if err := s.cfg.Registerer.Register(c); err != nil {
			return fmt.Errorf("ingest: metrics: %w", err)
		}
	}
	return nil
}

// BrowserRoutes are the routes a page calls (the web SDK's comments and
// reports, a host page's announcements and takedowns, which carry the
// host's dynamic token, never a cookie): the only ones the ingest grants
// CORS (httpx.EngineConfig.CORSRoutes). Gifts come from business servers,
// and the lottery, ban, report review and broadcast APIs from operators'
// tools.
var BrowserRoutes = []string{"/v1/rooms/:room/barrage", "/v1/rooms/:room/announce", "/v1/rooms/:room/reports", "/v1/admin/rooms/:room/takedowns"}

// Register adds the upload routes to r, behind the rate limits when
// Config.RateLimit is set.
func (s *Server) Register(r gin.IRoutes) {
	pre := []gin.HandlerFunc{s.track}
	if h := s.RateLimitHandler(); h != nil {
		// Limits first: a refused request is not in flight.
		pre = []gin.HandlerFunc{h, s.track}
	}
	with := func(h gin.HandlerFunc) []gin.HandlerFunc { return append(pre[:len(pre):len(pre)], h) }
	r.POST("/v1/rooms/:room/barrage", with(s.barrage)...)
	r.POST("/v1/rooms/:room/announce", with(s.announce)...)
	r.POST("/v1/rooms/:room/reports", with(s.report)...)
	r.POST("/v1/gifts", append([]gin.HandlerFunc{s.countGiftAnswer}, with(s.gift)...)...)
}

// countGiftAnswer counts the gift API's answer by status, the rate
// limiter's included (it runs inside).
func (s *Server) countGiftAnswer(c *gin.Context) {
	c.Next()
	s.giftAnswers.WithLabelValues(strconv.Itoa(c.Writer.Status())).Inc()
}

// RateLimitHandler is the rate-limit middleware of this node (nil without
// Config.RateLimit), for the operator APIs registered beside the upload
// routes.
func (s *Server) RateLimitHandler() gin.HandlerFunc {
	return s.limit
}

// LiveNodes is how many ingest nodes were live in the last load snapshot,
// at least this one: they share a shared rate-limit window's limit while
// it is unreachable.
func (s *Server) LiveNodes() int { return s.liveIngestNodes() }

// limitIdentity is the rate limiter's user: the user of a dynamic token
// that verifies (through the token cache, which the handler then hits).
func (s *Server) limitIdentity(c *gin.Context) ratelimit.Identity {
	tok := httpx.BearerToken(c, "")
	if tok == "" {
		return ratelimit.Identity{}
	}
	claims, err := s.tokens.Verify(tok)
	if err != nil {
		return ratelimit.Identity{}
	}
	return ratelimit.Identity{User: claims.Subject}
}

// Run reports load and syncs per-room online counts until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if s.lotteries != nil {
		wg.Go(func() { _ = s.lotteries.Run(ctx) })
	}
	wg.Go(func() { _ = s.bans.Run(ctx) })
	wg.Go(func() { _ = s.words.Run(ctx) })
	wg.Go(func() { _ = s.mod.Run(ctx) })
	wg.Go(func() { _ = s.dups.Run(ctx) })
	if s.ownAudit {
		wg.Go(func() { _ = s.audit.Run(ctx) })
	}
	if s.cfg.Load != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := loadtable.Reporter{Table: s.cfg.Load, Interval: defaultReport, Load: s.Load, Now: s.cfg.Clock.Now, Ready: s.cfg.Keyring.Ready}
			_ = r.Run(ctx)
		}()
	}
	t, tick := clock.TimersOf(s.cfg.Clock).NewTicker(defaultOnlineSync)
	defer t.Stop()
	for {
		s.syncOnline(ctx)
		s.users.Sweep(s.cfg.Clock.Now())
		s.reportBucket.Sweep(s.cfg.Clock.Now())
		select {
		case <-ctx.Done():
			wg.Wait()
			if s.ownAudit {
				s.shutdownAudit()
			}
			return nil
		case <-tick:
		}
	}
}

// Load is this node's load report.
func (s *Server) Load() loadtable.NodeLoad {
	l := loadtable.NodeLoad{ID: s.cfg.NodeID, Kind: loadtable.KindIngest, Addr: s.cfg.Addr, Line: s.cfg.Line, Region: s.cfg.Region, Conns: int(s.inflight.Load()), Capacity: s.cfg.MaxInFlight}
	if s.cfg.CPU != nil {
		l.CPU = s.cfg.CPU()
	}
	return l
}

// syncOnline reads which nodes are alive (from the load table, through the
// node's view of it: only what changed since the last look) and the edges'
// online counts, and sums the counts of the live edges per room.
func (s *Server) syncOnline(ctx context.Context) {
	if s.cfg.Load == nil {
		return
	}
	now := s.cfg.Clock.Now()
	loads, _, err := s.view.Sync(ctx, now)
	if err != nil {
		return // keep the last counts
	}
	s.binding.Update(loads)
	ingests, rank := 0, 0
	liveEdges := map[string]bool{}
	for _, l := range loads {
		if l.Kind == loadtable.KindIngest && l.Age(now) <= onlineStale {
			ingests++
			if l.ID < s.cfg.NodeID {
				rank++
			}
		}
		// An edge that stopped reporting (crashed without removing itself)
		// no longer counts its viewers.
		if l.Kind == loadtable.KindEdge && l.Age(now) <= onlineStale {
			liveEdges[l.ID] = true
		}
	}
	if ot := s.onlineTable(); ot != nil {
		if byNode, err := ot.Online(ctx); err == nil {
			m := map[string]int{}
			for node, rooms := range byNode {
				if !liveEdges[node] {
					continue
				}
				for room, n := range rooms {
					m[room] += n
				}
			}
			s.online.Store(&m)
		}
	}
	s.ingestNodes.Store(int64(ingests))
	s.ingestRank.Store(int64(rank))
}

// onlineTable is Config.Online, else the load table when it is also an
// OnlineTable.
func (s *Server) onlineTable() loadtable.OnlineTable {
	if s.cfg.Online != nil {
		return s.cfg.Online
	}
	ot, _ := s.cfg.Load.(loadtable.OnlineTable)
	return ot
}

// flushPhase is this node's flush slot within the write-behind window:
// node i of n (by id) at i·window/n (see writer.phase).
func (s *Server) flushPhase(window time.Duration) time.Duration {
	n := s.liveIngestNodes()
	return window * time.Duration(s.ingestRank.Load()%int64(n)) / time.Duration(n)
}

// liveIngestNodes is how many ingest nodes share a room's limit: those live
// in the last load snapshot, at least this one.
func (s *Server) liveIngestNodes() int {
	return max(1, int(s.ingestNodes.Load()))
}

// roomCapacity is the room bucket's capacity for the room's online count.
// roomLimits are the upload limits of one room: its event's, where set,
// else this node's.
type roomLimits struct {
	userCap, userPerSec float64
	roomCeiling         float64
	roomRefill          float64
}

// limits returns the room's upload limits and anti-spam settings from one
// look at the event directory (a barrage needs both).
func (s *Server) limits(room string) (roomLimits, spamLimits) {
	l := roomLimits{s.cfg.UserCapacity, s.cfg.UserRefill, s.cfg.RoomCeiling, s.cfg.RoomRefill}
	sl := spamLimits{wordPolicy: s.mod.Current().WordPolicy}
	if s.cfg.Events == nil {
		return l, sl
	}
	v, ok := s.cfg.Events.Lookup(room)
	if !ok {
		return l, sl
	}
	sl = s.spamLimitsOf(v)
	if v.Room.Limits == nil {
		return l, sl
	}
	e := v.Room.Limits
	if e.UserBurst > 0 {
		l.userCap = e.UserBurst
	}
	if e.UserEveryMs > 0 {
		l.userPerSec = 1000 / float64(e.UserEveryMs)
	}
	if e.RoomCeiling > 0 {
		l.roomCeiling = e.RoomCeiling
	}
	if e.RoomRefill > 0 {
		l.roomRefill = e.RoomRefill
	}
	return l, sl
}

func (s *Server) roomCapacity(room string, ceiling float64) float64 {
	n := (*s.online.Load())[room]
	return min(float64(n)*s.cfg.RoomPerViewer+s.cfg.RoomBase, ceiling)
}

func (s *Server) track(c *gin.Context) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	c.Next()
}

func (s *Server) reject(c *gin.Context, layer string, e *httpx.Error) {
	s.countRejected(layer, e.Code, roomOf(c))
	httpx.Abort(c, e)
}

// authorize verifies the token and its binding to this node and the room.
func (s *Server) authorize(c *gin.Context) (*auth.Claims, bool) {
	claims, err := s.tokens.Verify(httpx.BearerToken(c, ""))
	if err != nil {
		code := "bad_token"
		switch {
		case errors.Is(err, auth.ErrNoToken):
			code = "no_token"
		case errors.Is(err, auth.ErrUnknownEpoch):
			code = "token_epoch"
		}
		s.reject(c, "auth", httpx.Errorf(http.StatusUnauthorized, code, "dynamic token rejected; fetch a new entry"))
		return nil, false
	}
	if s.cfg.Addr != "" && !claims.ForIngest(s.cfg.Addr) {
		// Also a token whose address names this node only as an edge: a
		// token's audience is its address partition (auth.Claims.Ingests).
		s.reject(c, "auth", httpx.Errorf(http.StatusForbidden, "wrong_node", "token was not issued for this node as an ingest"))
		return nil, false
	}
	if room := c.Param("room"); room != claims.Room {
		s.reject(c, "auth", httpx.Errorf(http.StatusForbidden, "wrong_room", "token was issued for another room"))
		return nil, false
	}
	return claims, true
}

type textBody struct {
	Text     *string `json:"text"`
	Playhead *int64  `json:"playhead_ms"`
}

// text binds and normalises {"text": "...", "playhead_ms": N}; the playhead
// is 0 when the body has none.
func (s *Server) text(c *gin.Context) (string, int64, bool) {
	var b textBody
	if e := httpx.BindJSON(c, s.cfg.MaxBody, &b); e != nil {
		s.reject(c, "input", e)
		return "", 0, false
	}
	if b.Text == nil {
		s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "missing_field", "field \"text\" is required"))
		return "", 0, false
	}
	t := normalize(*b.Text)
	if t == "" {
		s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "empty_text", "text is empty after normalisation"))
		return "", 0, false
	}
	if utf8.RuneCountInString(t) > s.cfg.MaxTextRunes {
		s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "text_too_long", "text exceeds %d characters", s.cfg.MaxTextRunes))
		return "", 0, false
	}
	p, e := s.playhead(b.Playhead)
	if e != nil {
		s.reject(c, "input", e)
		return "", 0, false
	}
	return t, p, true
}

// ok is the one success answer of barrage: stored and silently dropped
// comments look the same, because a failure answer only makes clients retry.
var ok = gin.H{"ok": true}

// live answers for a room that takes no messages now and reports whether
// it does.
func (s *Server) live(c *gin.Context, room string) bool {
	c.Set(roomKey, room)
	if s.cfg.Events == nil {
		return true
	}
	if err := s.cfg.Events.CheckIssued(room); err != nil {
		s.reject(c, "room", event.RoomHTTPError(err))
		return false
	}
	return true
}

func (s *Server) barrage(c *gin.Context) {
	claims, good := s.authorize(c)
	if !good {
		return
	}
	// The user's bucket is kept on the user's primary node only.
	if v := s.binding.Check(claims, s.cfg.Clock.Now()); !v.Allowed() {
		s.reject(c, "auth", v.refusal())
		return
	}
	if !s.live(c, claims.Room) {
		return
	}
	text, playhead, good := s.text(c)
	if !good {
		return
	}
	room := claims.Room
	m := wire.Message{Kind: wire.KindBarrage, User: claims.User(), Nick: claims.Nick, Avatar: claims.Avatar, Text: text, Playhead: playhead}
	// A banned user neither comments nor enters lotteries.
	if s.bans.Banned(room, m.User) {
		s.drop(c, &m, room, text, "antispam", ReasonBanned)
		return
	}
	if s.lotteries != nil {
		// A lottery keyword is an entry, not a comment: it skips the
		// buckets (recorded once per user; shown under the fast-lane cap).
		lm := m
		entry, err := s.lotteries.Match(c.Request.Context(), claims.Room, lm)
		if err != nil {
			s.backendError(c, "enter lottery", err) // a retry is safe: entries are recorded once
			return
		}
		if entry.Lottery != "" {
			s.countAccepted("lottery", claims.Room)
			s.record(&lm, claims.Room, text, audit.Stored, "lottery", "")
			c.JSON(http.StatusOK, gin.H{"ok": true, "lottery": entry.Lottery})
			return
		}
	}
	now := s.cfg.Clock.Now()
	lim, sl := s.limits(room)
	if !s.users.TakeWith(claims.User(), now, lim.userCap, lim.userPerSec, 1) {
		s.overflows.WithLabelValues("user").Inc()
		s.drop(c, &m, room, text, "gateway", "user_bucket")
		return
	}
	if !s.global.Allow(sl.event, sl.eventRate) {
		s.drop(c, &m, room, text, "antispam", ReasonGlobalLimit)
		return
	}
	shown, verdict := s.words.Check(text, sl.wordPolicy)
	switch verdict {
	case WordsRejected:
		if sl.wordPolicy == WordsRefuse {
			s.record(&m, room, text, audit.Rejected, ReasonSensitiveWord, "")
			s.reject(c, "antispam", RefusedWordError())
			return
		}
		s.drop(c, &m, room, text, "antispam", ReasonSensitiveWord)
		return
	case WordsMasked:
		m.Text = shown
	}
	if s.dups.SeenWithin(room, text, now, sl.dupWindow) {
		s.drop(c, &m, room, text, "antispam", ReasonDuplicate)
		return
	}
	decision, why := audit.Stored, ""
	if verdict == WordsMasked {
		decision, why = audit.Masked, "sensitive_word"
	}
	switch s.writer.submit(c.Request.Context(), room, m, roomLimit{s.roomCapacity(room, lim.roomCeiling), lim.roomRefill}) {
	case outStored:
		s.countAccepted("barrage", room)
		s.record(&m, room, text, decision, why, "")
	case outRoomBucket:
		s.overflows.WithLabelValues("room").Inc()
		s.drop(c, &m, room, text, "gateway", "room_bucket")
		return
	case outRoomShare:
		// The room bucket is unreachable: this node's share of it said no.
		s.overflows.WithLabelValues("room_share").Inc()
		s.drop(c, &m, room, text, "gateway", "room_share")
		return
	case outUnavailable:
		s.record(&m, room, text, audit.Rejected, "backend_unavailable", "")
		s.backendError(c, "append barrage", errors.New("room gate unreachable past the hold time, or the room's queue is full"))
		return
	case outGone:
		s.record(&m, room, text, audit.Dropped, "client_gone", "")
		s.countRejected("client", "gone", room)
		return
	}
	c.JSON(http.StatusOK, ok)
}

// drop answers a barrage comment a layer dropped as if it were stored (an
// error answer would only make clients retry, and tell spammers which rule
// they met), counts it by layer and reason, and records it.
func (s *Server) drop(c *gin.Context, m *wire.Message, room, text, layer, reason string) {
	s.countRejected(layer, reason, room)
	s.record(m, room, text, audit.Dropped, reason, "")
	c.JSON(http.StatusOK, ok)
}

func (s *Server) backendError(c *gin.Context, op string, err error) {
	s.reject(c, "backend", unavailable(c, s.cfg.Logger, "storage unavailable; retry", op, err))
}

func (s *Server) announce(c *gin.Context) {
	var (
		m    wire.Message
		room string
	)
	if httpx.KeyMatches(c, s.cfg.AnnounceKeys) {
		// A business server's announcement: no sender, the operator role.
		room = c.Param("room")
		if !wire.ValidRoom(room) {
			s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "bad_room", "room must be 1-64 characters of A-Z a-z 0-9 _ -"))
			return
		}
		m = wire.Message{Kind: wire.KindSystem, Role: auth.RoleOps}
	} else {
		claims, good := s.authorize(c)
		if !good {
			return
		}
		if claims.Role != auth.RoleHost && claims.Role != auth.RoleAdmin {
			s.reject(c, "auth", httpx.Errorf(http.StatusForbidden, "forbidden", "announcements need a host or admin ticket, or an announcement key"))
			return
		}
		room = claims.Room
		m = wire.Message{Kind: wire.KindSystem, User: claims.User(), Nick: claims.Nick, Avatar: claims.Avatar, Role: claims.Role}
	}
	if !s.live(c, room) {
		return
	}
	text, playhead, good := s.text(c)
	if !good {
		return
	}
	m.Text, m.Playhead = text, playhead
	// Announcements skip the buckets, but the room displays at most its
	// fast-lane cap a second (shared with lottery entries, across nodes).
	limit := s.fastLaneCap(room)
	shown, err := s.cfg.FastLane.Show(c.Request.Context(), room, stream.Live, m, limit)
	if err != nil {
		s.backendError(c, "append announcement", err)
		return
	}
	if !shown.OK() {
		s.overflows.WithLabelValues("fast_lane").Inc()
		e := httpx.Errorf(http.StatusTooManyRequests, "fast_lane_full", "the room displays at most %d announcements and lottery entries a second; retry later", limit)
		e.RetryAfter = shown.RetryAfter
		s.reject(c, "fast_lane", e)
		return
	}
	s.countAccepted("system", room)
	c.JSON(http.StatusOK, gin.H{"ok": true, "id": shown.ID})
}

// fastLaneCap is the room's fast-lane cap: its event's, else this node's.
func (s *Server) fastLaneCap(room string) int {
	if s.cfg.Events != nil {
		if v, ok := s.cfg.Events.Lookup(room); ok && v.Room.Limits != nil && v.Room.Limits.FastLanePerSec >= 1 {
			return min(int(v.Room.Limits.FastLanePerSec), maxFastLaneCap)
		}
	}
	return s.cfg.FastLaneCap
}

// giftBacklogBound is the room's gift backlog bound in seconds: its
// event's, else 0 (the gift log's default).
func (s *Server) giftBacklogBound(room string) float64 {
	if s.cfg.Events != nil {
		if v, ok := s.cfg.Events.Lookup(room); ok && v.Room.Limits != nil {
			return v.Room.Limits.GiftBacklogS
		}
	}
	return 0
}

// Lotteries returns the node's lottery matcher (nil without a
// LotteryStore), for the operator API to refresh after a change.
func (s *Server) Lotteries() *Lotteries { return s.lotteries }

// GiftRequest is the body of POST /v1/gifts.
type GiftRequest struct {
	OrderID string `json:"order_id"`
	Room    string `json:"room"`
	User    string `json:"user"`
	Nick    string `json:"nick"`
	Avatar  string `json:"avatar"`
	Gift    string `json:"gift"`
	Value   *int64 `json:"value"`
	Count   uint32 `json:"count"`
}

func (s *Server) gift(c *gin.Context) {
	if !httpx.KeyMatches(c, s.cfg.GiftKeys) {
		s.reject(c, "auth", httpx.Errorf(http.StatusUnauthorized, "bad_service_key", "gift API needs a service key"))
		return
	}
	var g GiftRequest
	if e := httpx.BindJSON(c, s.cfg.MaxBody, &g); e != nil {
		s.reject(c, "input", e)
		return
	}
	if e := g.check(); e != nil {
		s.reject(c, "input", e)
		return
	}
	if !s.live(c, g.Room) {
		return
	}
	count := g.Count
	if count == 0 {
		count = 1
	}
	m := wire.Message{Kind: wire.KindGift, User: g.User, Nick: g.Nick, Avatar: g.Avatar, Gift: g.Gift, Value: *g.Value, Count: count, Order: g.OrderID}
	id, dup, err := s.cfg.Gifts.AppendGift(c.Request.Context(), g.Room, g.OrderID, m)
	if be, ok := errors.AsType[*GiftBacklogError](err); ok {
		// Not stored: the room's slicer is behind on gifts. The business
		// server retries the same order id later; nothing is lost.
		s.overflows.WithLabelValues("gift_backlog").Inc()
		e := httpx.Errorf(http.StatusTooManyRequests, "gift_backlog", "room %s has %.0f s of gifts waiting to be shown (bound %.0f s); retry the same order later", g.Room, be.Backlog, be.Bound)
		e.RetryAfter = be.RetryAfter
		s.reject(c, "gift", e)
		return
	}
	if ce, ok := errors.AsType[*OrderConflictError](err); ok && ce.FirstRoom != "" {
		e := httpx.Errorf(http.StatusConflict, "order_conflict",
			"order_id %q was first used in room %s, not %s: not stored, a new gift needs a new order id", ce.Order, ce.FirstRoom, ce.Room)
		s.reject(c, "gift", e)
		return
	} else if ok {
		// Not stored, and not a retry: the business server reused an
		// order id. A duplicate:true would tell it this gift was accepted.
		e := httpx.Errorf(http.StatusConflict, "order_conflict",
			"order_id %q was used in room %s for another gift (user %q, gift %q, value %d, count %d); this one differs in %s: not stored, a new gift needs a new order id",
			ce.Order, ce.Room, ce.First.User, ce.First.Gift, ce.First.Value, ce.First.Count, strings.Join(ce.Fields, ", "))
		s.reject(c, "gift", e)
		return
	}
	if errors.Is(err, ErrReplicasOffline) {
		// Not stored: the room's Redis master has no replica online to
		// confirm it (a failover left none). Retried with the same order
		// id, it is stored once one is back.
		e := unavailable(c, s.cfg.Logger, "gift not stored: the room's storage has no replica online to confirm it (a failover); retry the same order id", "append gift", err)
		s.reject(c, "backend", e)
		return
	}
	if err != nil {
		// The gift may or may not be stored (a timeout after Redis ran the
		// append, a WAIT that fell short); either way the business
		// server's retry with the same order id stores it at most once and
		// answers its one id — duplicate:true if this try stored it.
		s.backendError(c, "append gift", err)
		return
	}
	if !dup {
		s.countAccepted("gift", g.Room)
		// A resent order broadcasts nothing: the first one did (or its
		// failure was counted).
		bctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 2*time.Second)
		s.giftCast.gift(bctx, g.Room, m)
		cancel()
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "id": id, "duplicate": dup})
}
