// Package loadgen is `danmaku loadgen`: a load generator that plays an
// audience against any deployment — `danmaku dev`, the local real stack or
// a concert's — through the public API only.
//
// It plays three parts at once:
//
//   - commenters: Users simulated viewers, each with its own business
//     ticket and its own entry from the gslb (ingest addresses and a dynamic
//     token, re-fetched as a client would), posting barrage to their ingest
//     at the offered rate (steady or a pulse), each no faster than the SDK's
//     send throttle allows unless Unthrottled;
//   - a business server: gifts through the gift API, each with a unique
//     order id, retried with the same id as the API asks;
//   - viewers: Pollers SDK clients reading the room through the CDN (and
//     the edge, if asked), which decode the generator's own comments and
//     gifts and so time them end to end.
//
// The offer is open-loop: a pacer issues what the schedule makes due,
// whatever the answers, into a bounded pool of workers; what the pool cannot
// take is counted, not queued without end. Connections are pooled and
// bounded by the in-flight limit (one shared transport), so a user costs
// no descriptor of its own: ten thousand users fit in one process, and the
// process's open-files limit bounds only the requests in flight. The ingest answers silent drops like stored
// comments, so drops by layer and reason come from the nodes' /metrics,
// read before and after the run.
//
// Run returns a Report: rates, errors by status and code, latencies by kind,
// drops by reason, end-to-end delivery. See docs/loadgen.md for the
// command line and how to read it.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"danmaku/auth"
	"danmaku/internal/devmode"
)

// Config configures a Generator. Every field has a zero-value default named
// on it; the counts and rates are the whole audience's, of which a process
// plays its shard's share.
type Config struct {
	// GSLB is the entry endpoint's base URL. Zero: `danmaku dev`'s,
	// http://127.0.0.1:7700.
	GSLB string
	// Room is the room to load; it must belong to a live event. Zero: "demo".
	Room string

	// Users is how many distinct viewers comment. Zero: 10,000.
	Users int
	// Shard and Shards split the audience over processes (each process has
	// its descriptor limit): this one plays the users whose index mod
	// Shards is Shard, and offers 1/Shards of every rate and of the
	// pollers. Zero Shards: 1, one process plays everyone.
	Shard, Shards int

	// Pattern is PatternSteady or PatternPulse. Zero: steady.
	Pattern string
	// Rate is the comments per second offered (steady; after a pulse's
	// hold). Zero: 1,000; negative: none.
	Rate float64
	// PulsePeak is the peak of a pulse in comments per second. Zero: 38,000.
	PulsePeak float64
	// PulseRamp is how long a pulse takes from 0 to its peak. Zero: 10 s.
	PulseRamp time.Duration
	// PulseHold is how long a pulse stays at its peak. Zero: to the end of
	// the run.
	PulseHold time.Duration
	// Duration is how long comments and gifts are offered. Zero: 60 s.
	Duration time.Duration

	// Unthrottled lets a user post as often as the schedule asks. Zero: a
	// user posts at most once per SendInterval, as the SDK's send queue
	// allows, so that the ingest's per-user bucket sees what real clients
	// send; the schedule's excess is counted as held back.
	Unthrottled bool
	// SendInterval is the client throttle. Zero: 1.2 s, the SDK's.
	SendInterval time.Duration

	// Keyword makes comments lottery entries: viewers typing the word the
	// host asked for, every one the same text, sent verbatim (at most 60
	// characters). Zero: every comment is a varied phrase tagged with the
	// run and its number, which the pollers find and time end to end; a
	// keyword entry carries no tag and is not traced.
	Keyword string
	// KeywordShare is the fraction of comments that are keyword entries,
	// the rest being phrases, in (0, 1]. Zero: 1, all of them.
	KeywordShare float64

	// GiftRate is the gifts per second. Zero: 10; negative: none.
	GiftRate float64
	// GiftKey is the gift API's service key (DANMAKU_GIFT_KEY). Zero:
	// `danmaku dev`'s public one.
	GiftKey string
	// GiftIngest is the ingest base URL gifts are posted to (a business
	// server's configured endpoint). Zero: the ingest addresses the users'
	// entries named, in turn.
	GiftIngest string

	// Pollers is how many SDK viewers read the room to time delivery.
	// Zero: 100; negative: none.
	Pollers int
	// PollerEdge makes the pollers hold the edge WebSocket as apps do (one
	// more connection each). Zero: segments through the CDN only.
	PollerEdge bool

	// TicketKey signs the users' business tickets (DANMAKU_TICKET_KEY of
	// the deployment). Zero: the public dev ticket key, which only
	// `danmaku dev` accepts.
	TicketKey []byte
	// DevTickets fetches each ticket from `danmaku dev`'s GET
	// /v1/dev/ticket instead of minting it here. Zero: minted here.
	DevTickets bool

	// SlicerMetrics are base URLs of slicers whose /metrics say what the
	// segments showed and sampled away. Zero: read from the ingest
	// endpoints, which in `danmaku dev` (one registry per process) hold
	// them; elsewhere the slicer figures are then absent.
	SlicerMetrics []string
	// IngestMetrics are base URLs of the ingests' metrics listeners
	// (-metrics-addr, which an ingest outside dev must have: its public
	// port serves no /metrics). Zero: the ingests the entries name, at
	// their public URLs, as `danmaku dev` serves them.
	IngestMetrics []string

	// Concurrency bounds the comment POSTs in flight (workers and
	// connections). The ingest answers a comment only once its batch is
	// flushed (a window of 150 ms), so a rate R needs about R/6 in flight,
	// and more while the server falls behind. Zero: this shard's peak rate
	// × 250 ms, at least 256 and at most 8,192 (which, with the other
	// pools, keeps a process under 20,000 descriptors).
	Concurrency int
	// GiftConcurrency bounds the gift POSTs in flight. Zero: 16.
	GiftConcurrency int
	// GiftRetryFor is how long an order whose tries fail for now is
	// retried with its order id before it is given up, as a business
	// server does (docs/api.md); it must outlast a Redis failover. Zero:
	// 30 s.
	GiftRetryFor time.Duration
	// EntryConcurrency bounds the entry fetches in flight while users
	// join. Zero: 64.
	EntryConcurrency int
	// JoinRate paces the joins (the pollers' and the users' entries, all
	// shards together) at this many a second, as the plan's join_per_s
	// has an audience arrive; the entry latency is then timed at that
	// rate. Zero: every join at once (EntryConcurrency users at a time and
	// every poller), a surge the plan may never have counted.
	JoinRate float64
	// RefreshEvery has each user re-fetch its entry at least this often,
	// sooner than the SDK's 80 % of the token's life: a soak shorter than
	// a token's life then sees its refreshes as steady state, several of
	// them, not one burst near its end (docs/reliability.md, "Soak").
	// Zero: at 80 % of the token's life only.
	RefreshEvery time.Duration
	// HTTPTimeout bounds every request. Zero: 10 s.
	HTTPTimeout time.Duration
	// JoinTimeout bounds the joining of users and pollers. Zero: 2 min.
	JoinTimeout time.Duration
	// Drain is the longest wait after the last answer for the pollers to
	// decode what was sent. Zero: two segments plus the publish delay plus
	// 2 s.
	Drain time.Duration

	// UserPrefix starts every simulated user id (users PREFIXn, pollers
	// PREFIXpn), so that runs can keep apart. Zero: "lg".
	UserPrefix string
	// RunID tags the generator's comments and order ids, so that its own
	// are told from anyone else's. Zero: random.
	RunID string

	// NodeMetrics are base URLs of more nodes (gslbs, edges, slicers)
	// whose /metrics are read for the per-node figures of the report
	// (Report.Nodes), besides the ingest and slicer metrics endpoints.
	// Zero: those endpoints only.
	NodeMetrics []string
	// NodeScrapeEvery is how often the nodes' /metrics are read during the
	// offer and the drain for Report.Nodes. Zero: 1 s; negative: never.
	NodeScrapeEvery time.Duration
	// EntryProbeEvery is how often, during the offer, one user fetches a
	// fresh entry to time the entry endpoint over the run (the joins are
	// over before the offer begins). Zero: 200 ms; negative: never.
	EntryProbeEvery time.Duration

	// Progress receives a line a second while the run goes (nil: none).
	Progress io.Writer
	// ProgressInPlace rewrites one line (a terminal) instead of writing a
	// line a second (a log).
	ProgressInPlace bool
	// Logger receives what goes wrong in the pollers' SDK clients. Nil:
	// discarded.
	Logger *slog.Logger
}

// idleConnTimeout is how long the generator keeps an idle connection: below
// the nodes' 90 s idle timeout (httpx.NewServer), so that the generator, not
// the node, closes it. At 90 s each, a node closing a connection as a sender
// took it failed the comment with eof (net/http retries no POST), and the
// sender's next address, a fallback, answered 421 not_primary: one pair of
// each in fault rows whose fault was not the ingest. The SDK's default
// client keeps the same 50 s.
const idleConnTimeout = 50 * time.Second

// Defaults of Config's zero values.
const (
	defaultUsers            = 10_000
	defaultRate             = 1000
	defaultPulsePeak        = 38_000
	defaultPulseRamp        = 10 * time.Second
	defaultDuration         = 60 * time.Second
	defaultSendInterval     = 1200 * time.Millisecond // sdk: defaultSendInterval
	defaultGiftRate         = 10
	defaultPollers          = 100
	minAutoConcurrency      = 256
	maxAutoConcurrency      = 8192
	autoConcurrencyWindow   = 250 * time.Millisecond
	defaultGiftConcurrency  = 16
	defaultGiftRetryFor     = 30 * time.Second
	defaultEntryConcurrency = 64
	defaultHTTPTimeout      = 10 * time.Second
	defaultJoinTimeout      = 2 * time.Minute
	defaultUserPrefix       = "lg"
	defaultNodeScrapeEvery  = time.Second
	defaultEntryProbeEvery  = 200 * time.Millisecond
	// maxKeywordRunes is the ingest's limit on a comment's length.
	maxKeywordRunes = 60
	// paceTick is how often the pacers issue what is due: fine enough that
	// a second's offer is smooth, coarse enough to cost nothing.
	paceTick = 2 * time.Millisecond
)

// applyDefaults fills in zero values and checks the rest.
func (c *Config) applyDefaults() error {
	if c.GSLB == "" {
		c.GSLB = devmode.GSLBURL
	}
	c.GSLB = strings.TrimRight(c.GSLB, "/")
	if !strings.HasPrefix(c.GSLB, "http://") && !strings.HasPrefix(c.GSLB, "https://") {
		return fmt.Errorf("loadgen: GSLB %q is not an http(s) URL", c.GSLB)
	}
	if c.Room == "" {
		c.Room = devmode.Room
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.Shards < 1 || c.Shard < 0 || c.Shard >= c.Shards {
		return fmt.Errorf("loadgen: shard %d/%d: need 0 ≤ shard < shards", c.Shard, c.Shards)
	}
	if err := c.loadDefaults(); err != nil {
		return err
	}
	c.Keyword = strings.TrimSpace(c.Keyword)
	switch {
	case c.Keyword == "" && c.KeywordShare != 0:
		return errors.New("loadgen: KeywordShare without a Keyword")
	case c.KeywordShare == 0:
		c.KeywordShare = 1
	case !(c.KeywordShare > 0 && c.KeywordShare <= 1):
		return fmt.Errorf("loadgen: KeywordShare %v: need 0 < share ≤ 1", c.KeywordShare)
	}
	if n := utf8.RuneCountInString(c.Keyword); n > maxKeywordRunes || !utf8.ValidString(c.Keyword) {
		return fmt.Errorf("loadgen: Keyword: at most %d characters of valid UTF-8", maxKeywordRunes)
	}
	if c.GiftKey == "" {
		c.GiftKey = devmode.ServiceKey
	}
	if c.GiftIngest != "" {
		c.GiftIngest = strings.TrimRight(c.GiftIngest, "/")
	}
	if len(c.TicketKey) > 0 && c.DevTickets {
		return errors.New("loadgen: a ticket key and dev tickets exclude each other")
	}
	if len(c.TicketKey) == 0 {
		c.TicketKey = auth.DevTicketKey
	}
	if c.UserPrefix == "" {
		c.UserPrefix = defaultUserPrefix
	}
	if c.RunID == "" {
		const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
		b := make([]byte, 5)
		for i := range b {
			b[i] = digits[rand.IntN(len(digits))]
		}
		c.RunID = string(b)
	}
	for _, r := range c.RunID + c.UserPrefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("loadgen: RunID and UserPrefix take A-Z a-z 0-9 _ - only")
		}
	}
	for i, u := range c.SlicerMetrics {
		c.SlicerMetrics[i] = strings.TrimRight(u, "/")
	}
	for i, u := range c.IngestMetrics {
		c.IngestMetrics[i] = strings.TrimRight(u, "/")
	}
	for i, u := range c.NodeMetrics {
		c.NodeMetrics[i] = strings.TrimRight(u, "/")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// loadDefaults fills and checks the load's figures: users, pollers,
// rates, concurrencies and durations.
func (c *Config) loadDefaults() error {
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defInt(&c.Users, defaultUsers)
	defInt(&c.Pollers, defaultPollers)
	defInt(&c.GiftConcurrency, defaultGiftConcurrency)
	defInt(&c.EntryConcurrency, defaultEntryConcurrency)
	if c.Users < c.Shards {
		return fmt.Errorf("loadgen: %d users cannot be split over %d shards", c.Users, c.Shards)
	}
	if c.Concurrency < 0 || c.GiftConcurrency < 1 || c.EntryConcurrency < 1 {
		return errors.New("loadgen: concurrencies must be positive")
	}
	if c.JoinRate < 0 {
		return errors.New("loadgen: JoinRate is negative")
	}
	if c.RefreshEvery < 0 {
		return fmt.Errorf("loadgen: RefreshEvery %v is negative", c.RefreshEvery)
	}
	switch {
	case c.GiftRetryFor < 0:
		return fmt.Errorf("loadgen: gift retry budget %v is negative", c.GiftRetryFor)
	case c.GiftRetryFor == 0:
		c.GiftRetryFor = defaultGiftRetryFor
	}
	defF := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defF(&c.Rate, defaultRate)
	defF(&c.PulsePeak, defaultPulsePeak)
	defF(&c.GiftRate, defaultGiftRate)
	switch c.Pattern {
	case "":
		c.Pattern = PatternSteady
	case PatternSteady, PatternPulse:
	default:
		return fmt.Errorf("loadgen: pattern %q: steady or pulse", c.Pattern)
	}
	if c.PulsePeak < 0 {
		return errors.New("loadgen: PulsePeak is negative")
	}
	if c.Concurrency == 0 {
		peak := c.rateShare(c.Rate)
		if c.Pattern == PatternPulse {
			peak = max(peak, c.rateShare(c.PulsePeak))
		}
		c.Concurrency = min(max(int(peak*autoConcurrencyWindow.Seconds()), minAutoConcurrency), maxAutoConcurrency)
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defD(&c.PulseRamp, defaultPulseRamp)
	defD(&c.Duration, defaultDuration)
	defD(&c.SendInterval, defaultSendInterval)
	defD(&c.HTTPTimeout, defaultHTTPTimeout)
	defD(&c.JoinTimeout, defaultJoinTimeout)
	defD(&c.NodeScrapeEvery, defaultNodeScrapeEvery)
	defD(&c.EntryProbeEvery, defaultEntryProbeEvery)
	for name, d := range map[string]time.Duration{"PulseRamp": c.PulseRamp, "PulseHold": c.PulseHold, "Duration": c.Duration,
		"SendInterval": c.SendInterval, "HTTPTimeout": c.HTTPTimeout, "JoinTimeout": c.JoinTimeout, "Drain": c.Drain} {
		if d < 0 {
			return fmt.Errorf("loadgen: %s is negative", name)
		}
	}
	return nil
}

// share is this shard's part of n things: the remainder goes to the first
// shards, so the parts add up to n.
func (c *Config) share(n int) int {
	if n <= 0 {
		return 0
	}
	s := n / c.Shards
	if c.Shard < n%c.Shards {
		s++
	}
	return s
}

// rateShare is this shard's part of a rate; negative (none) stays 0.
func (c *Config) rateShare(r float64) float64 { return max(r, 0) / float64(c.Shards) }

// OpenFiles estimates the most descriptors a run with cfg (defaults
// applied) holds: connections are pooled and bounded, so this is a few per
// in-flight request and per poller, whatever the number of users. A
// process's limit (ulimit -n; 20,000 on the reference machine) beyond
// that calls for several processes, each with its -shard.
func (c Config) OpenFiles() int {
	workers := c.Concurrency + c.GiftConcurrency + c.EntryConcurrency
	perPoller := 2 // the CDN connection, and the gslb's for entry and time
	if c.PollerEdge {
		perPoller++
	}
	return 2*workers + c.share(c.Pollers)*perPoller + 64
}

// Generator runs one load test. Create it with New, run it once with Run.
type Generator struct {
	cfg    Config
	sched  schedule // comments, this shard's share
	gifts  schedule // gifts, this shard's share
	hc     *http.Client
	pollHC *http.Client
	tag    string // " #RUNID." — what marks the generator's own comments

	keywordBody []byte // the keyword entry's JSON, shared by every request

	users       []*user // this shard's, joined (all of them when only gifts are offered)
	usersTotal  int     // this shard's, joined or not
	usersJoined int     // this shard's with an entry

	joins *joinPacer

	// The room's timing, from the first entry: how long delivery takes.
	segmentMs, publishDelayMs atomic.Int64

	ingestMu sync.Mutex
	ingests  []string // every ingest address an entry named, in order seen

	// comments
	due, attempted, answeredOK, held, overrun, noEntry atomic.Int64
	keywordOK                                          atomic.Int64 // of answeredOK, keyword entries (not traced)
	errs                                               counterMap
	netTexts                                           sync.Map // network error class → its first raw text (Report.NetworkErrors)
	seqs                                               seqStore
	nextSeq                                            int64 // pacer only

	// gifts
	giftOrders, giftAttempts, giftAccepted, giftDupRetry, giftDupFirst, giftFailed, giftOverrun atomic.Int64
	giftStatus                                                                                  counterMap
	giftMu                                                                                      sync.Mutex
	giftIDs                                                                                     map[string]*giftSample

	// users
	entryErrs counterMap
	refreshes atomic.Int64

	lat struct {
		entry, post, gift, e2e, giftE2E, sendDelay, genLag Histogram
		// e2e cut in three (observeBarrageSplit)
		toStore, toEnd, afterEnd Histogram
		// entry cut in two: the joins, and the probes and refreshes
		// during the offer
		entryJoin, entryOffer Histogram
	}
	// window holds the latencies of the current progress second.
	window atomic.Pointer[secondWindow]
	// loadStart is when the offer began (set before it does).
	loadStart   time.Time
	entryProbes atomic.Int64

	pollers     []*pollerState
	pc          pollerCounters
	pendingMu   sync.Mutex
	pending     []decodeEvent // decoded before its POST's answer was in
	decodeUnacc atomic.Int64
	// pendingOver counts decodes not kept for later because pending was
	// full: each is a delivery the report cannot count (Untracked).
	pendingOver atomic.Int64

	ran atomic.Bool
}

// New checks cfg and applies its defaults. It starts nothing.
func New(cfg Config) (*Generator, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, giftIDs: map[string]*giftSample{}, joins: &joinPacer{rate: cfg.rateShare(cfg.JoinRate)}}
	g.sched = schedule{pulse: cfg.Pattern == PatternPulse, base: cfg.rateShare(cfg.Rate), peak: cfg.rateShare(cfg.PulsePeak), ramp: cfg.PulseRamp, hold: cfg.PulseHold}
	if g.sched.hold == 0 {
		g.sched.hold = -1
	}
	g.gifts = schedule{base: cfg.rateShare(cfg.GiftRate)}
	// The shard is in the tag: two shards' comments of the same number
	// must differ, or the ingest's duplicate suppression drops one.
	g.tag = " #" + cfg.RunID + "-" + strconv.Itoa(cfg.Shard) + "."
	if cfg.Keyword != "" {
		g.keywordBody, _ = json.Marshal(struct {
			Text string `json:"text"`
		}{cfg.Keyword})
	}
	workers := cfg.Concurrency + cfg.GiftConcurrency + cfg.EntryConcurrency
	// One transport for every request to the gslb and the ingests: its pool
	// is what bounds the descriptors, and keep-alive connections are what
	// let one process offer thousands of requests a second.
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        workers,
		MaxIdleConnsPerHost: workers,
		MaxConnsPerHost:     workers,
		IdleConnTimeout:     idleConnTimeout,
		ForceAttemptHTTP2:   true,
	}
	g.hc = &http.Client{Timeout: cfg.HTTPTimeout, Transport: tr}
	if n := cfg.share(cfg.Pollers); n > 0 {
		// The pollers' own pool: they all ask for a segment in the same
		// millisecond, and a shared, smaller pool would queue them and
		// time the generator instead of the CDN.
		ptr := tr.Clone()
		ptr.MaxIdleConns, ptr.MaxIdleConnsPerHost, ptr.MaxConnsPerHost = 2*n+8, n+4, n+4
		g.pollHC = &http.Client{Timeout: cfg.HTTPTimeout, Transport: ptr}
	}
	g.window.Store(new(secondWindow))
	return g, nil
}

// Config returns the configuration with its defaults applied.
func (g *Generator) Config() Config { return g.cfg }

// Run joins the users and pollers, offers the load for Config.Duration,
// waits for delivery and returns the report. Cancelling ctx while users
// join fails the run; cancelling it later ends the offer early and still
// reports (Report.Run.Interrupted). A Generator runs once.
func (g *Generator) Run(ctx context.Context) (*Report, error) {
	if !g.ran.CompareAndSwap(false, true) {
		return nil, errors.New("loadgen: Run already called")
	}
	defer g.hc.CloseIdleConnections()
	rep := &Report{Version: ReportVersion}
	g.fillRun(rep)
	rep.Run.Start = time.Now().UTC()

	// Pollers first: they join while the users do, and must be polling
	// before the first comment is sent.
	pctx, stopPollers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPollers()
	joinStart := time.Now()
	g.joins.start = joinStart
	g.startPollers(pctx)
	defer g.waitPollers()

	if err := g.joinUsers(ctx); err != nil {
		return nil, err
	}
	if err := g.awaitPollers(ctx); err != nil {
		return nil, err
	}
	rep.Users.JoinSeconds = time.Since(joinStart).Seconds()
	rep.Users.JoinRatePerSec = g.joins.rate
	rep.Users.Joins = int64(g.usersJoined + g.joinedPollers())
	g.progressf(true, "joined %d users and %d pollers in %.1fs; offering %s for %v\n",
		g.usersJoined, len(g.pollers), rep.Users.JoinSeconds, g.sched, g.cfg.Duration)

	// Counters before: the ingest's drop counters and the pollers' stats.
	mctx, mcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	ingests := g.metricEndpoints()
	before := scrape(mctx, g.hc, ingests, g.cfg.SlicerMetrics)
	mcancel()
	statsBefore := g.pollerStats()

	// The offer. Requests outlive ctx (they are answered, not abandoned):
	// an interrupted run still reports what it sent.
	rctx := context.WithoutCancel(ctx)
	loadStart := time.Now()
	g.loadStart = loadStart
	self := startSelfMeter(&g.lat.genLag)
	nodesDone := make(chan struct{})
	var nodes sync.WaitGroup
	nodes.Go(func() { rep.Nodes = g.scrapeNodes(rctx, loadStart, nodesDone) })
	jobs := make(chan barrageJob, g.cfg.Concurrency)
	giftJobs := make(chan giftJob, g.cfg.GiftConcurrency)
	var workers sync.WaitGroup
	for range g.cfg.Concurrency {
		workers.Go(func() { g.barrageWorker(rctx, jobs) })
	}
	for range g.cfg.GiftConcurrency {
		workers.Go(func() { g.giftWorker(rctx, giftJobs) })
	}
	progressDone := make(chan struct{})
	var progress sync.WaitGroup
	progress.Go(func() { rep.Timeline = g.progressLoop(loadStart, progressDone) })
	stopResolver := g.startResolver()
	var pacers sync.WaitGroup
	if g.offersBarrage() {
		pacers.Go(func() { g.paceBarrage(ctx, loadStart, jobs) })
	}
	if g.gifts.base > 0 {
		pacers.Go(func() { g.paceGifts(ctx, loadStart, giftJobs) })
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	probes.Go(func() { g.probeEntries(probeCtx) })
	pacers.Wait()
	stopProbes()
	probes.Wait()
	rep.Run.LoadSeconds = time.Since(loadStart).Seconds()
	rep.Run.Interrupted = ctx.Err() != nil
	close(jobs)
	close(giftJobs)
	workers.Wait()
	close(progressDone)
	progress.Wait()

	// Delivery: the last comments are due at the CDN a segment and the
	// publish delay after their send.
	g.drain(ctx)
	mctx, mcancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	after := scrape(mctx, g.hc, ingests, g.cfg.SlicerMetrics)
	mcancel()
	self.stop(&rep.Generator)
	close(nodesDone)
	nodes.Wait()
	statsAfter := g.pollerStats()
	stopPollers()
	g.waitPollers()
	stopResolver()
	g.resolvePending(true)

	rep.Run.End = time.Now().UTC()
	g.fillReport(rep, before, after, statsBefore, statsAfter, ingests)
	return rep, nil
}

// joinUsers mints tickets and fetches entries for this shard's users,
// EntryConcurrency at a time. The first user joins alone, so that a wrong
// key or a room outside a live event fails the run at once with a hint
// rather than ten thousand times.
func (g *Generator) joinUsers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.joinTimeout())
	defer cancel()
	var all []*user
	for i := g.cfg.Shard; i < g.cfg.Users; i += g.cfg.Shards {
		id := g.cfg.UserPrefix + strconv.Itoa(i)
		all = append(all, &user{id: id, nick: "u" + strconv.Itoa(i%100_000)})
	}
	first := all[0]
	s, err := g.fetchEntry(ctx, first)
	if err != nil {
		return fmt.Errorf("loadgen: %w%s", err, hintFor(err, !g.cfg.DevTickets && string(g.cfg.TicketKey) == string(auth.DevTicketKey)))
	}
	first.sess.Store(s)
	g.noteIngests(s.entry.Ingest)
	g.segmentMs.Store(s.entry.SegmentMs)
	g.publishDelayMs.Store(s.entry.PublishDelayMs)
	g.usersTotal = len(all)
	if !g.offersBarrage() {
		// Gifts alone: the business server names users but they need no
		// entry of their own; one entry found the ingests.
		g.users, g.usersJoined = all, 1
		return nil
	}

	next := make(chan *user)
	var joined atomic.Int64
	joined.Add(1)
	var wg sync.WaitGroup
	for range min(g.cfg.EntryConcurrency, len(all)) {
		wg.Go(func() {
			for u := range next {
				if g.joins.wait(ctx) != nil {
					continue // the join timed out
				}
				s, err := g.fetchEntry(ctx, u)
				if err != nil {
					continue // counted in entryErrs; the user stays out
				}
				u.sess.Store(s)
				g.noteIngests(s.entry.Ingest)
				joined.Add(1)
			}
		})
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
feed:
	for _, u := range all[1:] {
		for {
			select {
			case next <- u:
				continue feed
			case <-tick.C:
				g.progressf(false, "joining users: %d/%d (%.0f/s)", joined.Load(), len(all), float64(joined.Load())/time.Since(start).Seconds())
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("loadgen: joining users: %w (%d of %d joined)", err, joined.Load(), len(all))
	}
	for _, u := range all {
		if u.sess.Load() != nil {
			g.users = append(g.users, u)
		}
	}
	g.usersJoined = len(g.users)
	return nil
}

// offersBarrage reports whether the schedule offers any comment.
func (g *Generator) offersBarrage() bool {
	return g.sched.base > 0 || (g.sched.pulse && g.sched.peak > 0)
}

// noteIngests remembers every ingest address handed out: their /metrics
// are read, and gifts go to them when no GiftIngest is set.
func (g *Generator) noteIngests(addrs []string) {
	g.ingestMu.Lock()
	defer g.ingestMu.Unlock()
	for _, a := range addrs {
		if !slices.Contains(g.ingests, a) {
			g.ingests = append(g.ingests, a)
		}
	}
}

func (g *Generator) ingestList() []string {
	g.ingestMu.Lock()
	defer g.ingestMu.Unlock()
	return slices.Clone(g.ingests)
}

// metricEndpoints are the nodes whose counters the report reads:
// Config.IngestMetrics when given, else every
// ingest an entry named, and the gift ingest.
func (g *Generator) metricEndpoints() []string {
	if len(g.cfg.IngestMetrics) > 0 {
		return g.cfg.IngestMetrics
	}
	l := g.ingestList()
	if g.cfg.GiftIngest != "" && !slices.Contains(l, g.cfg.GiftIngest) {
		l = append(l, g.cfg.GiftIngest)
	}
	return l
}

// pace issues what s makes due between start and start+Duration (or
// ctx's end), each event stamped with its own scheduled time (timeOf), not
// the tick's: a tick that comes late issues the events it missed with the
// times they were due, so the delay counts in their latency.
func (g *Generator) pace(ctx context.Context, s schedule, start time.Time, issue func(at time.Time)) {
	t := time.NewTicker(paceTick)
	defer t.Stop()
	var issued int64
	for {
		now := time.Now()
		el := min(now.Sub(start), g.cfg.Duration)
		for due := int64(s.cumulative(el)); issued < due; issued++ {
			at := now
			if d, ok := s.timeOf(float64(issued + 1)); ok && d <= el {
				at = start.Add(d)
			}
			issue(at)
		}
		if el >= g.cfg.Duration {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type barrageJob struct {
	at  time.Time
	u   *user
	seq int64
}

// paceBarrage gives each due comment to the next user in turn. A user its
// throttle holds back does not post (its app would queue the comment and
// drop the oldest); a comment the workers cannot take is not offered — the
// generator or the server is saturated, and the report says how much.
func (g *Generator) paceBarrage(ctx context.Context, start time.Time, jobs chan<- barrageJob) {
	next := 0
	g.pace(ctx, g.sched, start, func(at time.Time) {
		g.due.Add(1)
		u := g.users[next]
		next = (next + 1) % len(g.users)
		if !g.cfg.Unthrottled {
			if at.Before(u.nextAt) {
				g.held.Add(1)
				return
			}
			u.nextAt = at.Add(g.cfg.SendInterval)
		}
		select {
		case jobs <- barrageJob{at: at, u: u, seq: g.nextSeq}:
			g.nextSeq++
		default:
			g.overrun.Add(1)
		}
	})
}

var jsonCT = []string{"application/json"}

func (g *Generator) barrageWorker(ctx context.Context, jobs <-chan barrageJob) {
	for j := range jobs {
		g.lat.sendDelay.Observe(time.Since(j.at))
		// A fallback ingest that answers 421 not_primary stored nothing:
		// the comment goes once more to the user's own node, as the SDK
		// sends it (sdk/send.go).
		for again := true; again; {
			again = g.postBarrage(ctx, j)
		}
	}
}

// postBarrage posts one comment and reports whether to post it again (to
// the primary, after a 421 not_primary from a fallback).
func (g *Generator) postBarrage(ctx context.Context, j barrageJob) (again bool) {
	s, err := g.sessionOf(ctx, j.u)
	if err != nil {
		g.noEntry.Add(1)
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.barrageURL, bytes.NewReader(g.body(j.seq)))
	if err != nil {
		g.errs.add("bad_request", 1)
		return false
	}
	req.Header = http.Header{"Authorization": s.authz, "Content-Type": jsonCT}
	g.attempted.Add(1)
	resp, err := g.hc.Do(req)
	if err != nil {
		g.observePost(time.Since(j.at))
		g.errs.add(g.netError(err).Error(), 1)
		// The SDK moves to the entry's next ingest address when one
		// cannot be reached.
		j.u.sess.CompareAndSwap(s, s.next(g.cfg.Room))
		return false
	}
	if resp.StatusCode == http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		now := time.Now()
		g.observePost(now.Sub(j.at))
		g.answeredOK.Add(1)
		if g.isKeyword(j.seq) {
			g.keywordOK.Add(1)
		} else {
			g.seqs.accept(j.seq, j.at)
		}
		return false
	}
	e := readError(resp)
	resp.Body.Close()
	g.observePost(time.Since(j.at))
	g.errs.add(e.Error(), 1)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		// A refused token (expired, unknown epoch): the next comment
		// fetches a new entry, as the SDK does.
		j.u.sess.CompareAndSwap(s, nil)
	case resp.StatusCode == http.StatusMisdirectedRequest && e.code == "not_primary" && s.ingestIdx != 0:
		return j.u.sess.CompareAndSwap(s, s.primary(g.cfg.Room))
	}
	return false
}

func (g *Generator) observePost(d time.Duration) {
	g.lat.post.Observe(d)
	g.window.Load().post.Observe(d)
}

// secondWindow holds one progress second's latencies by kind, for the
// report's timeline: swapped for a fresh one every second, so its memory
// is a few histograms whatever the run's length.
type secondWindow struct {
	post, barrageE2E, giftE2E, entry Histogram
}

func (g *Generator) observeBarrageE2E(d time.Duration) {
	g.lat.e2e.Observe(d)
	g.window.Load().barrageE2E.Observe(d)
}

func (g *Generator) observeGiftE2E(d time.Duration) {
	g.lat.giftE2E.Observe(d)
	g.window.Load().giftE2E.Observe(d)
}

func (g *Generator) observeEntry(d time.Duration) {
	g.lat.entry.Observe(d)
	g.window.Load().entry.Observe(d)
	// The joins are over before loadStart is set (Run), and the probes
	// and refreshes start after it.
	if g.loadStart.IsZero() {
		g.lat.entryJoin.Observe(d)
	} else {
		g.lat.entryOffer.Observe(d)
	}
}

// phrases are typical comments (10-20 characters, mostly Chinese), so that
// bodies, normalisation and segments weigh what a concert's do. Each gets
// the run's tag and the comment's number appended: " #RUNID.SEQ".
var phrases = []string{
	"前方高能预警", "哈哈哈哈哈哈哈哈哈哈", "这段太燃了吧", "666666", "好听到哭了呜呜呜",
	"主播加油", "爷青回！", "高音好稳啊这是现场吗", "第一次看直播来打卡", "副歌部分全场合唱",
	"泪目了家人们", "这个舞台绝了", "弹幕护体", "有人和我一样从开头看到现在吗", "太好看了吧", "求返场",
}

// isKeyword reports whether comment seq is a keyword entry (Config.Keyword)
// rather than a traced phrase. The choice is a hash of seq, so the shares
// hold in every stretch of the run, and every part of the generator agrees
// on it without keeping a list.
func (g *Generator) isKeyword(seq int64) bool {
	switch {
	case g.cfg.Keyword == "":
		return false
	case g.cfg.KeywordShare >= 1:
		return true
	}
	h := uint64(seq) * 0x9e3779b97f4a7c15 // Fibonacci hashing: consecutive seqs spread evenly
	return float64(h>>11)/(1<<53) < g.cfg.KeywordShare
}

// body is a comment's JSON, built by appending: encoding/json per comment
// would be a measurable share of the generator's CPU.
func (g *Generator) body(seq int64) []byte {
	if g.isKeyword(seq) {
		return g.keywordBody
	}
	p := phrases[seq%int64(len(phrases))]
	b := make([]byte, 0, 16+len(p)+len(g.tag)+12)
	b = append(b, `{"text":"`...)
	b = append(b, p...)
	b = append(b, g.tag...)
	b = strconv.AppendInt(b, seq, 36)
	return append(b, `"}`...)
}

// ownSeq returns the number of one of the generator's own comments from
// its text as decoded.
func (g *Generator) ownSeq(text string) (int64, bool) {
	i := strings.LastIndex(text, g.tag)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(text[i+len(g.tag):], 36, 64)
	return n, err == nil && n >= 0
}

// counterMap counts by key (an error's status and code), lock-free once a
// key exists.
type counterMap struct{ m sync.Map }

func (c *counterMap) add(key string, n int64) {
	v, ok := c.m.Load(key)
	if !ok {
		v, _ = c.m.LoadOrStore(key, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(n)
}

func (c *counterMap) snapshot() map[string]int64 {
	out := map[string]int64{}
	c.m.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (c *counterMap) total() int64 {
	var n int64
	c.m.Range(func(_, v any) bool {
		n += v.(*atomic.Int64).Load()
		return true
	})
	return n
}

// seqStore keeps, per comment number, when it was due to be sent (stored
// once its POST is answered 200: zero means not accepted) and how many
// pollers decoded it. Chunks of atomics rather than a map under a
// lock: thousands of writers a second and a hundred readers.
type seqStore struct {
	mu     sync.Mutex
	chunks atomic.Pointer[[]*seqChunk]
}

const chunkBits = 14

type seqChunk struct {
	acceptedNs [1 << chunkBits]atomic.Int64
	decodedBy  [1 << chunkBits]atomic.Int32
}

func (s *seqStore) chunk(seq int64, create bool) *seqChunk {
	i := int(seq >> chunkBits)
	if p := s.chunks.Load(); p != nil && i < len(*p) {
		return (*p)[i]
	}
	if !create {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur []*seqChunk
	if p := s.chunks.Load(); p != nil {
		cur = *p
	}
	if i < len(cur) {
		return cur[i]
	}
	grown := slices.Clone(cur)
	for len(grown) <= i {
		grown = append(grown, new(seqChunk))
	}
	s.chunks.Store(&grown)
	return grown[i]
}

func (s *seqStore) accept(seq int64, at time.Time) {
	s.chunk(seq, true).acceptedNs[seq&(1<<chunkBits-1)].Store(at.UnixNano())
}

// acceptedAt is when seq was due to be sent, zero if it was not (yet)
// answered 200.
func (s *seqStore) acceptedAt(seq int64) int64 {
	c := s.chunk(seq, false)
	if c == nil {
		return 0
	}
	return c.acceptedNs[seq&(1<<chunkBits-1)].Load()
}

func (s *seqStore) decoded(seq int64) {
	s.chunk(seq, true).decodedBy[seq&(1<<chunkBits-1)].Add(1)
}

// each calls f with every comment number up to n that was answered 200:
// when it was due (UnixNano) and how many pollers decoded it.
func (s *seqStore) each(n int64, f func(acceptedNs int64, decodedBy int32)) {
	p := s.chunks.Load()
	if p == nil {
		return
	}
	for seq := int64(0); seq < n; seq++ {
		i := int(seq >> chunkBits)
		if i >= len(*p) {
			break
		}
		c := (*p)[i]
		k := seq & (1<<chunkBits - 1)
		if acc := c.acceptedNs[k].Load(); acc != 0 {
			f(acc, c.decodedBy[k].Load())
		}
	}
}

// shownBySecond adds to each second of line the comments up to n that
// were due in it, answered 200 and decoded by at least one poller; start
// is when the offer began. A second's entry ends at its T.
func (s *seqStore) shownBySecond(n int64, start time.Time, line []Second) {
	if len(line) == 0 {
		return
	}
	s.each(n, func(acc int64, decodedBy int32) {
		if decodedBy == 0 {
			return
		}
		at := time.Duration(acc - start.UnixNano()).Seconds()
		j, _ := slices.BinarySearchFunc(line, at, func(s Second, t float64) int {
			if s.T < t {
				return -1
			}
			return 1
		})
		line[min(j, len(line)-1)].Shown++
	})
}

// tally counts, over the comments answered 200 up to n, those decoded by
// at least one poller and by at least all (pollers) of them.
func (s *seqStore) tally(n int64, pollers int) (accepted, shown, shownAll int64) {
	s.each(n, func(_ int64, d int32) {
		accepted++
		if d > 0 {
			shown++
		}
		if pollers > 0 && int(d) >= pollers {
			shownAll++
		}
	})
	return accepted, shown, shownAll
}
