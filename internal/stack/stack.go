// Package stack wires the roles of one process: any subset of gslb, ingest,
// edge, slicer and origin, sharing the backends they are given. `danmaku dev`
// runs every role on in-memory backends; `danmaku <role>` runs one. The
// in-process end-to-end tests use it too, so they exercise exactly what a
// newcomer runs.
//
// New binds the listeners (so addresses are known) and starts nothing; Run
// serves until its context ends and then shuts the roles down in an order
// that loses nothing: edges drain first, the slicer writes what is due last.
package stack

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/edge"
	"danmaku/gslb"
	"danmaku/gslb/lines"
	"danmaku/ingest"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/devmode"
	"danmaku/internal/event"
	"danmaku/internal/hlsdemo"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/internal/objstore"
	"danmaku/internal/ratelimit"
	"danmaku/internal/rules"
	"danmaku/internal/stream"
	"danmaku/internal/sysload"
	"danmaku/internal/tlsx"
	"danmaku/slicer"
)

// Role names.
const (
	RoleGSLB   = "gslb"
	RoleIngest = "ingest"
	RoleEdge   = "edge"
	RoleSlicer = "slicer"
	RoleOrigin = "origin"
)

// AllRoles is what `danmaku dev` runs.
var AllRoles = []string{RoleGSLB, RoleIngest, RoleEdge, RoleSlicer, RoleOrigin}

// Default listen addresses of embedded mode (docs/operations.md), as
// internal/devmode defines them for the stack and the tools alike.
const (
	DefaultGSLBAddr   = devmode.GSLBAddr
	DefaultIngestAddr = devmode.IngestAddr
	DefaultEdgeAddr   = devmode.EdgeAddr
	DefaultOriginAddr = devmode.OriginAddr
	DefaultSlicerAddr = devmode.SlicerAddr
	// DevServiceKey is every service key of `danmaku dev` (gift,
	// announcement, operator): devmode.ServiceKey. Public on purpose;
	// refused everywhere else.
	DevServiceKey = devmode.ServiceKey
)

// Backends are the stores of the roles, grouped by who uses them. Nil
// fields get in-memory ones.
type Backends struct {
	// Shared are read or written by several roles.
	Shared SharedBackends
	// Ingest are the ingest's own.
	Ingest IngestBackends
	// Slicer are the slicer's own.
	Slicer SlicerBackends
	// Limits are the rate limits' of the gslb, ingest and edge.
	Limits LimitBackends
}

// SharedBackends are the stores several roles share.
type SharedBackends struct {
	// Streams are the rooms' message streams: the ingest appends, the edge
	// and the slicer read.
	Streams stream.Store
	// Objects hold the segments and manifests: the slicer writes, the
	// origin serves.
	Objects objstore.Store
	// Load is the load table: the edge and ingest report, the gslb reads.
	Load loadtable.Table
	// Secrets are the token secrets: the gslb signs, the others verify.
	Secrets auth.SecretStore
	// Events keeps the events: which rooms exist, when, with what settings.
	Events event.Store
	// Bans keeps the operators' bans: the ingest's operator API writes
	// them, the gslb, ingest and edge read them. Nil: in memory.
	Bans ingest.BanStore
	// Audit keeps the audit trail of the ingest and the slicer. Nil:
	// Config.AuditDir, else in memory.
	Audit objstore.Store
	// Rules keeps the versioned word lists and rate-limit rules the fleet
	// follows (`danmaku words`, `danmaku limits`). Nil: in memory.
	Rules rules.Store
}

// IngestBackends are the ingest's stores.
type IngestBackends struct {
	Gate  ingest.RoomGate
	Gifts ingest.GiftLog
	// FastLane caps what a room displays of announcements and lottery
	// entries. Nil: in memory over Shared.Streams.
	FastLane ingest.FastLane
	// Lotteries keeps the lotteries and their entrants.
	Lotteries ingest.LotteryStore
	// Takedowns keeps the rooms' takedowns. Nil: in memory.
	Takedowns ingest.TakedownStore
	// Global is the event-wide comment bucket. Nil: in memory.
	Global ingest.GlobalLimiter
	// Reports keeps the viewers' reports of comments. Nil: in memory.
	Reports ingest.ReportStore
}

// SlicerBackends are the slicer's stores.
type SlicerBackends struct {
	Lease    slicer.Lease
	Settings slicer.SettingsStore
	// Backlog is where slicer leaders publish each room's gift backlog.
	// Nil: in memory, shared by this process's slicer and ingest (whose
	// gift log then refuses new gifts over a room's bound).
	Backlog slicer.Backlog
}

// LimitBackends are the rate limits' stores.
type LimitBackends struct {
	// Window keeps the rate limits' shared windows. Nil: in memory.
	Window ratelimit.Window
	// Rules is where the rate-limit rules are changed at run time, shared
	// by the nodes (Redis). Nil: Config.RateLimitsFile, else the rules at
	// start for good.
	Rules ratelimit.RuleSource
}

// Config configures a Stack.
type Config struct {
	// Roles to run. Empty: AllRoles.
	Roles []string
	// Listen addresses per role ("127.0.0.1:0" picks a free port). Zero:
	// the Default*Addr constants.
	GSLBAddr, IngestAddr, EdgeAddr, OriginAddr, SlicerAddr string
	// MetricsAddr, when set, is a listener of its own for the process's
	// /metrics (and /healthz), plain HTTP, and no role's listener serves
	// /metrics any more (it answers 404 not_found there): the edge's and
	// the ingest's ports are public, the metrics port is for the scrapers
	// only. Zero: every role serves /metrics on its own listener (dev,
	// tests; `danmaku edge` and `danmaku ingest` require it outside dev).
	MetricsAddr string
	// PublicCDN is the CDN base URL clients are handed. Zero: this stack's
	// origin ("http://<OriginAddr>/").
	PublicCDN string
	// DataDir keeps segments on disk. Zero: in memory.
	DataDir string
	// AuditDir keeps the audit trail on disk when Backends.Shared.Audit is nil.
	// Zero: in memory (tests).
	AuditDir string
	// EdgeCapacity (-max-conns) and IngestCapacity (-ingest-capacity) are
	// the connections (edge) and in-flight requests (ingest) this process's
	// nodes are sized for (the edge holds no more: 503 over_capacity),
	// reported to the gslb as their capacity: it hands a node out by its
	// headroom and stops at its overload bound. Zero: unlimited (headroom
	// from CPU alone).
	EdgeCapacity, IngestCapacity int
	// Line is the ISP line this process's edge and ingest addresses serve
	// ("" = BGP, reachable from every line), named as the gslb's
	// classifier names lines.
	Line string
	// Region is where this process's nodes stand, reported to the gslb
	// ("" = unknown), named as the classifier names regions.
	Region string
	// TrustedProxies are the addresses or CIDRs whose X-Forwarded-For is
	// believed (the gslb classifies a client's line by its address). Zero:
	// none; the peer's address is the client's.
	TrustedProxies []string
	// MinProtocol is the oldest client protocol the gslb and the edge
	// serve; SyncMinProtocol the oldest the gslb lets sync to its playhead
	// (gslb.Config). Zero: 1 and 2.
	MinProtocol, SyncMinProtocol int
	// GSLBMaxInFlight bounds the entry requests the gslb answers at once
	// (beyond: 503 overloaded at once). Zero: 128.
	GSLBMaxInFlight int
	// GSLBMaxTableAge is how long the gslb uses its last good load table
	// while syncs fail (then 503 table_stale). Zero: 3 s.
	GSLBMaxTableAge time.Duration
	// Lines classifies clients into lines for the gslb (package
	// gslb/lines: a MaxMind DB and/or an operator CIDR file, re-read when
	// they change). Zero: every client is unknown and gets BGP nodes.
	Lines lines.Config
	// AuditRetention is how long audit objects are kept; the ingest
	// deletes older ones hourly (each node sweeps; deletes are idempotent,
	// and a sweep lists about what it deletes). Zero: 30 days.
	AuditRetention time.Duration
	// WordsFile is the sensitive-word list (one word a line, # comments),
	// re-read when it changes. Zero: no list.
	WordsFile string
	// WordPolicy is what a listed word does unless a room's event says:
	// mask (default), reject (dropped silently), refuse (422) or off;
	// until a moderation document is pushed (`danmaku moderation push`),
	// whose word_policy then holds on every ingest.
	WordPolicy string
	// Backends shared by the roles. Zero fields: in memory.
	Backends Backends
	// MasterKey derives token secrets. When set, this process runs an auth
	// center that publishes them (every center with the same key publishes
	// the same secrets, so several may run). Zero: with in-memory secrets, a
	// random key and a center of its own (embedded mode); with shared
	// secrets (Redis), no center — another process must run one.
	MasterKey []byte
	// IngestURL and EdgeURL are the addresses clients are handed for this
	// process's ingest and edge (what tokens are bound to). Zero: derived
	// from the listen addresses.
	IngestURL, EdgeURL string
	// NodeID names this process as slicer lease holder and load reporter.
	// Zero: "<hostname>-<pid>".
	NodeID string
	// Dev is `danmaku dev`: the public dev ticket key, DevServiceKey for
	// every scope and a random master key fill in what is not given, and
	// the gslb serves the demo page and dev tickets. Without Dev no public
	// key is accepted and every role refuses to start without its own keys
	// (checkKeys says which).
	Dev bool
	// DevUnsafeBackends is `danmaku dev -dev-unsafe-backends`: every role
	// in one process as with Dev, but on real backends or with production
	// keys, so nothing public: no key is filled in (each role requires its
	// own, as without Dev), the public keys are refused, and neither the
	// demo page nor GET /v1/dev/ticket is served (404 not_found). False:
	// Dev alone says.
	DevUnsafeBackends bool
	// DevVideo makes dev serve a live HLS test stream with program date
	// times at the gslb's /hls/live.m3u8 (internal/hlsdemo: ffmpeg's
	// pattern with the clock on it), the video the demo page plays under
	// the barrage. Without ffmpeg dev says so and serves none.
	DevVideo bool
	// TicketKey verifies business tickets (DANMAKU_TICKET_KEY). Required by
	// the gslb; at least auth.MinTicketKeyBytes.
	TicketKey []byte
	// PreviousTicketKey, during a rotation of the login service's key,
	// verifies the tickets signed with the old key beside TicketKey
	// (DANMAKU_TICKET_KEY_PREVIOUS). Nil: one key.
	PreviousTicketKey []byte
	// TicketMaxLifetime refuses tickets living longer (exp after iat or
	// now). Zero: auth.DefaultMaxTicketLifetime (24 h).
	TicketMaxLifetime time.Duration
	// TicketAudience and TicketIssuer, when set, must be a ticket's aud
	// (one of) and iss. Empty: not checked.
	TicketAudience, TicketIssuer string
	// GiftKeys are the gift API's service keys (DANMAKU_GIFT_KEYS).
	// Required by the ingest.
	GiftKeys []string
	// AnnounceKeys let business servers post system announcements to a
	// room (DANMAKU_ANNOUNCE_KEYS). Optional: hosts announce with their
	// tickets.
	AnnounceKeys []string
	// OperatorKeys guard the operator APIs: events on the gslb, run-time
	// settings on the slicer (DANMAKU_OPERATOR_KEYS). Required by both.
	OperatorKeys []string
	// Budget is the slicer's messages per second. Zero: the slicer's default.
	Budget int
	// SegmentMs is the segment duration of rooms whose event sets none
	// (1000, 500 or 250). Zero: 1000.
	SegmentMs int64
	// Events are created when the stack starts, unless an event with the
	// same id exists. Dev adds DemoEvent.
	Events []event.Event
	// Retention is how long an ended room's streams are kept. Zero: the
	// slicer's default (1 h).
	Retention time.Duration
	// MinGiftValue is the edge's push threshold. Zero: every gift.
	MinGiftValue int64
	// BroadcastGiftValue is the gift value from which the ingest also
	// broadcasts a gift site-wide (ingest.Config.BroadcastGiftValue).
	// Zero: never.
	BroadcastGiftValue int64
	// ReadTimeout bounds how long every role waits for a request's header
	// and body (net/http's ReadTimeout; the header alone has at most 5 s). A
	// request that has not arrived by then is closed, so a client that
	// declares a body and never sends it cannot hold a socket. Zero: 15 s.
	ReadTimeout time.Duration
	// EdgeDrain is how long the edge drains on shutdown. Zero: 10 s; 1 s
	// with Dev.
	EdgeDrain time.Duration
	// EdgeConnectRate, EdgeMaxUserConns and EdgeMaxRoomConns are the
	// edge's admission limits (edge.Config's ConnectRate, MaxConnsPerUser,
	// MaxRoomConns). Zero: the edge's defaults.
	EdgeConnectRate                    float64
	EdgeMaxUserConns, EdgeMaxRoomConns int
	// EdgeMaxHelloWaits and EdgeMaxAddrHelloWaits are edge.Config's
	// MaxHelloWaits and MaxHelloWaitsPerAddr: sockets waiting for their
	// hello, per node and per client address. Zero: the edge's defaults.
	EdgeMaxHelloWaits, EdgeMaxAddrHelloWaits int
	// EdgeReportEvery is edge.Config.ReportEvery: the least time between
	// two counter reports of one connection. Zero: the edge's 5 s (the
	// SDKs report every 10 s); tests whose clients report faster set it.
	EdgeReportEvery time.Duration
	// EdgeTLSCert and EdgeTLSKey are the PEM files of the certificate the
	// edge serves WSS with (TLS 1.2 at least, HTTP/1.1 only), re-read when
	// they change so that a renewal needs no restart. Both or neither.
	// Zero: plain WS (dev, tests, an edge behind a TLS-terminating hop).
	EdgeTLSCert, EdgeTLSKey string
	// IngestTLSCert and IngestTLSKey are the same for the ingest, which
	// then serves HTTPS and is handed out as https://. A role that
	// terminates TLS itself sees each client's own address as the socket's
	// peer: no proxy hop to trust. Zero: plain HTTP.
	IngestTLSCert, IngestTLSKey string
	// TLSPoll is how often the edge and the ingest re-read their
	// certificate files. Zero: tlsx.DefaultPoll (5 s).
	TLSPoll time.Duration
	// CORSOrigins are the web origins whose pages may call the gslb and the
	// ingest and connect to the edge ("*": any). Zero: none, except that
	// with Demo the gslb's own origin is added (the demo page's).
	CORSOrigins []string

	// RateLimits are the gslb's and the ingest's rate-limit rules at start
	// (docs/api-limits.md). Nil: ratelimit.DefaultRules for this machine's
	// cores, loopback allowlisted with Dev only.
	RateLimits *ratelimit.Rules
	// RateLimitsFile is a rules document re-read every 250 ms, so that
	// the rules change without a restart; it wins over
	// Backends.Limits.Rules. Zero: none.
	RateLimitsFile string
	// GSLBNodes is how many gslb processes share the gslb's window rules,
	// each admitting its share while the shared window is unreachable.
	// Zero: 1. (An ingest counts the live ingest nodes itself.)
	GSLBNodes int

	// EntryClock is the gslb host's clock: login times, and what the store
	// clock is followed against. Nil: the system clock. Tests skew it to
	// show that clients schedule on the store clock, not the gslb host's.
	EntryClock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Stack is a running set of roles.
type Stack struct {
	cfg      Config
	log      *slog.Logger
	registry *prometheus.Registry

	URLs map[string]string // role → base URL clients use

	video atomic.Pointer[hlsdemo.Stream] // dev's demo video, while it runs

	center    *auth.Center
	keyring   *auth.Keyring
	storeTime *clock.Follower
	events    *event.Directory
	allocator *gslb.Allocator
	entry     *gslb.Server
	ingest    *ingest.Server
	edge      *edge.Server
	slicer    *slicer.Slicer
	// cpu samples the process's and the machine's CPU for the load
	// reports of this process's edge and ingest.
	cpu *sysload.Sampler
	// lines classifies the gslb's clients (nil: none configured).
	lines *lines.Classifier
	// limiter applies the rate limits of this process's gslb and ingest
	// (nil: neither role).
	limiter *ratelimit.Limiter
	// audit is the process's audit recorder, shared by its ingest (every
	// comment's decision) and slicer (comments sampled away); Run runs it
	// and writes what it holds after every role has stopped.
	audit *audit.Recorder

	servers []*roleServer
	// origins are the browser origins the gslb, ingest and edge allow.
	origins httpx.Origins
	// roleGatherer is what the roles' engines serve at /metrics: nil when
	// the process has a metrics listener of its own.
	roleGatherer prometheus.Gatherer
}

// MetricsListener keys the metrics listener's URL in Stack.URLs (with
// Config.MetricsAddr); it is no role.
const MetricsListener = "metrics"

type roleServer struct {
	role string
	ln   net.Listener
	srv  *http.Server
	// tls is the role's certificate when it terminates TLS itself (nil:
	// plain); Run keeps it fresh.
	tls *tlsx.Pair
}

func (c *Config) has(role string) bool {
	for _, r := range c.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// DemoRoom is the room of the event `danmaku dev` creates, so that the
// README's commands and the demo page work as they are: devmode.Room.
const DemoRoom = devmode.Room

// DemoEvent is the event `danmaku dev` creates: room "demo", live from
// start for a week.
func DemoEvent(start time.Time) event.Event {
	return event.Event{ID: "demo", Title: "danmaku dev", Start: start, End: start.Add(7 * 24 * time.Hour), Rooms: []event.Room{{ID: DemoRoom}}}
}

// createEvents creates the configured events that do not exist yet.
func (s *Stack) createEvents(ctx context.Context) error {
	for _, e := range s.cfg.Events {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("stack: %w", err)
		}
		if err := s.cfg.Backends.Shared.Events.Create(ctx, e); err != nil && !errors.Is(err, event.ErrExists) {
			return fmt.Errorf("stack: create event %s: %w", e.ID, err)
		}
	}
	return nil
}

// devPublic reports whether the public dev keys, dev tickets and the demo
// page are this process's: `danmaku dev` on embedded backends only.
func (c *Config) devPublic() bool { return c.Dev && !c.DevUnsafeBackends }

// devKeys fills in the public keys of `danmaku dev` where none were given.
func (c *Config) devKeys() {
	if len(c.TicketKey) == 0 {
		c.TicketKey = auth.DevTicketKey
	}
	for _, keys := range []*[]string{&c.GiftKeys, &c.AnnounceKeys, &c.OperatorKeys} {
		if len(*keys) == 0 {
			*keys = []string{DevServiceKey}
		}
	}
	if len(c.MasterKey) == 0 && c.Backends.Shared.Secrets == nil {
		// In-memory secrets and nobody else to publish them: this process
		// is the auth center, with a key nobody needs to know.
		c.MasterKey = make([]byte, 32)
		_, _ = rand.Read(c.MasterKey)
	}
}

// checkKeys refuses a configuration whose roles lack their keys, naming
// every missing one. Outside embedded dev (devPublic) a public dev key is
// refused too: anyone can mint tickets with it.
func (c *Config) checkKeys() error {
	var missing []string
	need := func(cond bool, what string) {
		if cond {
			missing = append(missing, what)
		}
	}
	verifies := c.has(RoleIngest) || c.has(RoleEdge)
	// The gslb signs tokens, which takes the master key (only the public
	// keys are published); the ingest and edge verify with those.
	need(c.has(RoleGSLB) && len(c.MasterKey) == 0,
		"the token master key: DANMAKU_MASTER_KEY (the gslb signs tokens; its processes run the auth center)")
	need(!c.has(RoleGSLB) && verifies && len(c.MasterKey) == 0 && c.Backends.Shared.Secrets == nil,
		"token keys: DANMAKU_MASTER_KEY (this process runs an auth center), or -redis where the gslb's auth center publishes them")
	need(c.has(RoleGSLB) && len(c.TicketKey) == 0, "the business ticket key: DANMAKU_TICKET_KEY")
	need((c.has(RoleGSLB) || c.has(RoleSlicer)) && len(nonEmpty(c.OperatorKeys)) == 0, "operator keys: DANMAKU_OPERATOR_KEYS")
	need(c.has(RoleIngest) && len(nonEmpty(c.GiftKeys)) == 0, "gift API keys: DANMAKU_GIFT_KEYS")
	// In-memory objects are private to this process: no CDN could read
	// them and other slicers' conditional puts would protect nothing.
	need(!c.Dev && c.Backends.Shared.Objects == nil && c.DataDir == "" && (c.has(RoleSlicer) || c.has(RoleOrigin)),
		"object storage: -s3-bucket (or -data DIR for a single node)")
	if len(missing) > 0 {
		return fmt.Errorf("stack: cannot start %s without %s", strings.Join(c.Roles, ", "), strings.Join(missing, "; "))
	}
	for _, k := range []struct {
		env string
		key []byte
	}{{"DANMAKU_TICKET_KEY", c.TicketKey}, {"DANMAKU_TICKET_KEY_PREVIOUS", c.PreviousTicketKey}} {
		if c.has(RoleGSLB) && len(k.key) > 0 && len(k.key) < auth.MinTicketKeyBytes {
			return fmt.Errorf("stack: %s is %d bytes: a ticket key takes at least %d (HS256 wants 256 bits, RFC 7518)", k.env, len(k.key), auth.MinTicketKeyBytes)
		}
	}
	if !c.devPublic() {
		if string(c.TicketKey) == string(auth.DevTicketKey) || string(c.PreviousTicketKey) == string(auth.DevTicketKey) {
			return errors.New("stack: the public dev ticket key is accepted only by `danmaku dev` on in-memory backends")
		}
		for _, k := range slices.Concat(c.GiftKeys, c.AnnounceKeys, c.OperatorKeys) {
			if k == DevServiceKey {
				return fmt.Errorf("stack: the public %q is accepted only by `danmaku dev` on in-memory backends", DevServiceKey)
			}
		}
	}
	return nil
}

func nonEmpty(keys []string) []string {
	var out []string
	for _, k := range keys {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// New builds the roles and binds their listeners. It reads as the order
// the roles are built in; each step is a function of roles.go.
func New(cfg Config) (*Stack, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	giftBacklog, err := cfg.Backends.withDefaults(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s, err := newStack(cfg)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			for _, rs := range s.servers {
				rs.ln.Close()
			}
		}
	}()
	// Listeners first: advertised addresses come from the bound ports.
	byRole, err := s.listenAll()
	if err != nil {
		return nil, err
	}
	if err := s.publicURLs(byRole); err != nil {
		return nil, err
	}
	if err := s.newKeys(); err != nil {
		return nil, err
	}
	if err := s.newLimits(); err != nil {
		return nil, err
	}
	// One constructor per role, in the order they depend on each other;
	// each does nothing when its role is not here (rs nil).
	for _, build := range []func() error{
		func() error { return s.newGSLB(byRole[RoleGSLB]) },
		func() error { return s.newAudit(byRole[RoleIngest] != nil || byRole[RoleSlicer] != nil) },
		func() error { return s.newIngest(byRole[RoleIngest], giftBacklog) },
		func() error { return s.newEdge(byRole[RoleEdge]) },
		func() error { return s.newSlicer(byRole[RoleSlicer]) },
		func() error { return s.newOrigin(byRole[RoleOrigin]) },
	} {
		if err := build(); err != nil {
			return nil, err
		}
	}
	s.serverTimeouts()
	ok = true
	return s, nil
}

// refreshBans reloads the bans of this process's roles after an operator
// API wrote them: a ban bites here at once, elsewhere within a reload
// interval (1 s).
// refreshRules puts a version pushed through this process's API in force
// in its own roles at once; the other nodes follow within their poll.
func (s *Stack) refreshRules(ctx context.Context, kind string) {
	switch {
	case kind == rules.KindWords && s.ingest != nil:
		_ = s.ingest.Words().Refresh(ctx)
	case kind == rules.KindLimits && s.limiter != nil:
		_ = s.limiter.Refresh(ctx)
	case kind == rules.KindModeration && s.ingest != nil:
		_ = s.ingest.Moderation().Refresh(ctx)
	}
}

func (s *Stack) refreshBans(ctx context.Context) {
	if s.ingest != nil {
		_ = s.ingest.Bans().Refresh(ctx)
	}
	if s.edge != nil {
		_ = s.edge.RefreshBans(ctx)
	}
	if s.entry != nil {
		_ = s.entry.RefreshBans(ctx)
	}
}

// Run serves every role until ctx is done, then shuts down and returns.
func (s *Stack) Run(ctx context.Context) error {
	if err := s.warmUp(ctx); err != nil {
		return err
	}
	if s.cfg.devPublic() && s.cfg.DevVideo {
		defer s.runVideo(ctx)()
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	s.runLoops(bg, &wg)
	defer s.runAudit(ctx)()
	var edgeDone chan struct{}
	if s.edge != nil {
		edgeDone = make(chan struct{})
		go func() {
			defer close(edgeDone)
			if err := s.edge.Run(bg); err != nil {
				s.log.Error("stack: edge stopped", "err", err)
			}
		}()
	}
	serveErr := make(chan error, len(s.servers))
	for _, rs := range s.servers {
		go func() {
			err := rs.srv.Serve(rs.ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			serveErr <- err
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	// Shutdown order: edges drain (clients reconnect gradually), then the
	// HTTP servers stop taking requests, then background loops stop.
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.EdgeDrain+5*time.Second)
	defer cancel()
	if s.edge != nil {
		_ = s.edge.Shutdown(sctx)
	}
	for _, rs := range s.servers {
		_ = rs.srv.Shutdown(sctx)
	}
	stopBG()
	wg.Wait()
	if edgeDone != nil {
		<-edgeDone
	}
	return err
}

// warmUp loads what the first requests need before any is served: the
// published secrets, the events, the store clock, the keyring.
func (s *Stack) warmUp(ctx context.Context) error {
	if s.center != nil {
		// Publish before the first request, so that the first entry
		// already gets a token.
		if err := s.center.Publish(ctx); err != nil {
			return err
		}
	}
	if err := s.createEvents(ctx); err != nil {
		return err
	}
	if s.events != nil {
		if err := s.events.Refresh(ctx); err != nil {
			// The directory's loop keeps trying; until then rooms answer a
			// retryable 503, not a 404.
			s.log.Warn("stack: events not loaded yet", "err", err)
		}
	}
	if s.storeTime != nil {
		if err := s.storeTime.Sync(ctx); err != nil {
			s.log.Warn("stack: store clock not read yet; entries carry this host's time until it is", "err", err)
		}
	}
	if s.keyring != nil {
		if err := s.keyring.Refresh(ctx); err != nil {
			// Another process's center may not have published yet; the
			// keyring's loop keeps trying.
			s.log.Warn("stack: token secrets not loaded yet", "err", err)
		}
	}
	return nil
}

// runLoops starts the background loops of the components here, each in
// wg, until bg ends.
func (s *Stack) runLoops(bg context.Context, wg *sync.WaitGroup) {
	var loops []func(context.Context) error
	if s.center != nil {
		loops = append(loops, s.center.Run)
	}
	if s.keyring != nil {
		loops = append(loops, s.keyring.Run)
	}
	for _, rs := range s.servers {
		if rs.tls != nil {
			loops = append(loops, rs.tls.Run)
		}
	}
	if s.allocator != nil {
		loops = append(loops, s.allocator.Run)
	}
	if s.entry != nil {
		loops = append(loops, s.entry.Run)
	}
	if s.lines != nil {
		loops = append(loops, s.lines.Run)
	}
	if s.storeTime != nil {
		loops = append(loops, s.storeTime.Run)
	}
	if s.events != nil {
		loops = append(loops, s.events.Run)
	}
	if s.ingest != nil {
		loops = append(loops, s.ingest.Run)
	}
	if s.limiter != nil {
		loops = append(loops, s.limiter.Run)
	}
	if s.slicer != nil {
		loops = append(loops, s.slicer.Run)
	}
	for _, f := range loops {
		wg.Go(func() {
			if err := f(bg); err != nil {
				s.log.Error("stack: component stopped", "err", err)
			}
		})
	}
}

// runAudit runs the audit recorder, when there is one, and returns what
// stops it and writes what it holds: called after every role has stopped,
// since they record until then.
func (s *Stack) runAudit(ctx context.Context) (stop func()) {
	if s.audit == nil {
		return func() {}
	}
	// Not under Run's background context: it must outlive the roles.
	actx, stopAudit := context.WithCancel(context.WithoutCancel(ctx))
	auditDone := make(chan struct{})
	go func() {
		defer close(auditDone)
		_ = s.audit.Run(actx)
	}()
	return func() {
		stopAudit()
		<-auditDone
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.audit.Shutdown(wctx); err != nil {
			s.log.Error("stack: audit trail: records not written at shutdown", "err", err)
		}
	}
}

// tlsFile names a role's certificate files.
type tlsFile struct {
	role, field string // field: the Config fields' prefix
	cert, key   string
}

// tlsFiles are the roles that may terminate TLS themselves, with their
// files.
func (c *Config) tlsFiles() []tlsFile {
	return []tlsFile{
		{RoleEdge, "Edge", c.EdgeTLSCert, c.EdgeTLSKey},
		{RoleIngest, "Ingest", c.IngestTLSCert, c.IngestTLSKey},
	}
}

// serveTLS makes rs terminate TLS with the certificate in certFile and
// keyFile. It is loaded here, before anything serves, so that a
// certificate that does not load stops the process at start.
func (s *Stack) serveTLS(rs *roleServer, certFile, keyFile string) error {
	pair, err := tlsx.New(tlsx.Config{CertFile: certFile, KeyFile: keyFile, Poll: s.cfg.TLSPoll, Logger: s.log.With("role", rs.role)})
	if err != nil {
		return fmt.Errorf("stack: %s TLS: %w", rs.role, err)
	}
	rs.tls = pair
	// net/http handshakes a *tls.Conn in the connection's own goroutine,
	// bounded by the server's header timeout: a slow handshake holds up
	// neither the accept loop nor, past that timeout, its goroutine.
	rs.ln = tls.NewListener(rs.ln, pair.ServerConfig())
	return nil
}

// advertise makes url (the operator's -edge-url or -ingest-url) what
// clients are handed for rs, when it is given: a name on the certificate,
// another port, whatever its scheme. A role serving TLS handed out under
// a plain scheme is logged: clients would fail unless something in
// between speaks TLS to it.
func (s *Stack) advertise(rs *roleServer, url, plain string) {
	if url == "" {
		return
	}
	s.URLs[rs.role] = url
	if rs.tls != nil && strings.HasPrefix(url, plain) {
		s.log.Warn("stack: the role serves TLS but its advertised URL is plain "+plain+"; clients will fail to connect unless something in between speaks TLS to it", "role", rs.role, "url", url)
	}
}

// handshakeQuiet is the error log of a role serving TLS: on a public
// port, failed handshakes (scanners, clocks a year off, ws:// sent to a
// wss:// port) come all day and say nothing about the edge, so they go to
// debug; anything else net/http reports stays a warning.
func handshakeQuiet(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(httpErrorWriter{log}, "", 0)
}

type httpErrorWriter struct{ log *slog.Logger }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// nodeCPU is what the process's edge and ingest report as their CPU: the
// process's own share, except in dev, where one process runs every role
// (and a load test against it) and its CPU would take both nodes out of
// the allocation at once.
func (s *Stack) nodeCPU() func() float64 {
	if s.cfg.Dev {
		return nil
	}
	return s.cpu.Process
}

// Ready waits until the gslb (if here) hands out addresses, i.e. nodes have
// reported load and the allocator has synced.
func (s *Stack) Ready(ctx context.Context) error {
	if s.allocator == nil {
		return nil
	}
	for {
		// An unknown client (BGP nodes) or a loopback one (the line a
		// classifier may give local clients, as in tests and dev).
		for _, ip := range []netip.Addr{{}, netip.AddrFrom4([4]byte{127, 0, 0, 1})} {
			if _, err := s.allocator.Allocate("ready-probe", ip); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// clockMargin exports how far the server time in every entry answer may be
// off: clients add it to the margin of their own clock estimate, and each
// poll waits that much past a second's due time (the ClockMarginLarge alert).
func clockMargin(f *clock.Follower) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "danmaku_gslb_clock_margin_seconds",
		Help: "Uncertainty of the store clock the gslb hands out as server time: half the round trip of its best sample (+Inf before the first).",
	}, func() float64 {
		_, rtt, ok := f.Offset()
		if !ok {
			return math.Inf(1)
		}
		return (rtt / 2).Seconds()
	})
}

// Backends returns the stores the roles share.
func (s *Stack) Backends() Backends { return s.cfg.Backends }

// Gatherer returns the process's metrics registry.
func (s *Stack) Gatherer() prometheus.Gatherer { return s.registry }

// PrintAddrs writes where each role listens, and the metrics listener.
func (s *Stack) PrintAddrs(w *os.File) {
	for _, role := range append(slices.Clone(AllRoles), MetricsListener) {
		if u, ok := s.URLs[role]; ok {
			fmt.Fprintf(w, "%-7s %s\n", role, u)
		}
	}
}

// newLimiter builds the process's rate limiter, shared by its gslb and
// ingest (one set of metrics): the rules at start, changed at run time
// from RateLimitsFile or Backends.Limits.Rules; the service keys as the
// credentials the rules count.
func (s *Stack) newLimiter() (*ratelimit.Limiter, error) {
	cfg := s.cfg
	start := ratelimit.DefaultRules(ratelimit.Machine{Dev: cfg.Dev})
	if cfg.RateLimits != nil {
		start = *cfg.RateLimits
	}
	var src ratelimit.RuleSource = cfg.Backends.Limits.Rules
	if src == nil {
		src = rules.NewLimitSource(cfg.Backends.Shared.Rules)
	}
	if cfg.RateLimitsFile != "" {
		fs := ratelimit.FileSource{Path: cfg.RateLimitsFile}
		// Read at start, so that a file that does not parse stops the
		// process instead of leaving it on the defaults.
		doc, err := fs.Load(context.Background())
		if err != nil {
			return nil, fmt.Errorf("stack: rate limits: %w", err)
		}
		if start, err = ratelimit.Parse(doc); err != nil {
			return nil, fmt.Errorf("stack: rate limits %s: %w", cfg.RateLimitsFile, err)
		}
		src = fs
	}
	lim, err := ratelimit.New(ratelimit.Config{
		Rules: start, Source: src, Window: cfg.Backends.Limits.Window,
		Credentials: map[string][]string{"gift": cfg.GiftKeys, "announce": cfg.AnnounceKeys, "operator": cfg.OperatorKeys},
		Nodes: func() int {
			if s.ingest != nil {
				return s.ingest.LiveNodes()
			}
			return max(1, cfg.GSLBNodes)
		},
		Registerer: s.registry, Logger: s.log.With("component", "ratelimit"),
	})
	if err != nil {
		return nil, fmt.Errorf("stack: rate limits: %w", err)
	}
	return lim, nil
}

// runVideo starts dev's demo video and returns what stops it. Without
// ffmpeg it logs how to get one: the page then runs without video.
func (s *Stack) runVideo(ctx context.Context) (stop func()) {
	v, err := hlsdemo.Start(context.WithoutCancel(ctx), s.cfg.DataDir, s.log)
	if err != nil {
		s.log.Info("stack: no demo video", "err", err)
		return func() {}
	}
	s.video.Store(v)
	s.log.Info("stack: demo video (HLS with program date times)", "url", s.URLs[RoleGSLB]+"/hls/"+hlsdemo.Playlist)
	return func() {
		s.video.Store(nil)
		v.Stop()
	}
}
