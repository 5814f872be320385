package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/ban"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/internal/ratelimit"
	"danmaku/internal/stream"
)

// Defaults applied by New to zero Config fields.
const (
	defaultMergeWindow  = 55 * time.Millisecond
	defaultQueueSize    = 64
	defaultRingSize     = 4096
	defaultReadBlock    = time.Second
	defaultPingInterval = 30 * time.Second
	defaultPongGrace    = 5 * time.Second
	defaultTokenGrace   = 30 * time.Second
	defaultWriteTimeout = 10 * time.Second
	defaultReadLimit    = 4 << 10
	defaultDrainPeriod  = 10 * time.Second
	defaultHelloTimeout = 5 * time.Second
	defaultBanReload    = 500 * time.Millisecond
	// defaultReportRate is three times the slicer's default budget (60
	// messages per viewer per second), the edge's pushes included.
	defaultReportRate   = 200
	defaultReportWindow = time.Minute
	// defaultReportEvery is half the SDKs' report interval (10 s).
	defaultReportEvery = 5 * time.Second

	// minMergeWindow is the shortest merge window accepted: frames closer
	// together than this get cut or coalesced by middleboxes anyway.
	minMergeWindow = 50 * time.Millisecond
)

// Fixed tuning that needs no knob.
const (
	// readCount is how many entries one store read returns at most.
	readCount = 256
	// maxFrameMessages bounds the messages in one frame, so that a burst
	// never builds a frame near wire.MaxFrameBytes.
	maxFrameMessages = 256
	// closeGrace bounds the close handshake: how long a socket waits for
	// the client to answer its close frame before closing anyway.
	closeGrace = 2 * time.Second
	// drainSteps is how many batches a drain closes connections in.
	drainSteps = 100
	// clientMsgBurst and clientMsgEvery rate-limit what a client may send
	// (counter reports, pings, pongs it was not asked for): a burst of 10,
	// then one every second of Config.Clock. More is closed with
	// ClosePolicy.
	clientMsgBurst = 10
	clientMsgEvery = time.Second
	// maxBackoff caps the wait between failed store reads.
	maxBackoff = time.Second
)

// ErrInvalidConfig is returned by New for a Config it cannot run with.
var ErrInvalidConfig = errors.New("edge: invalid config")

// ErrDraining is returned by the health check once Shutdown has begun.
var ErrDraining = errors.New("edge: draining")

// Verifier checks a dynamic token locally. *auth.Keyring implements it.
type Verifier interface {
	Verify(token string) (*auth.Claims, error)
}

var _ Verifier = (*auth.Keyring)(nil)

// Config configures a Server.
type Config struct {
	// Store is the room stream store whose Live lanes are pushed. Required.
	Store stream.Store
	// Verifier checks the dynamic token of every handshake. Required.
	Verifier Verifier
	// Addr is the address the gslb hands out for this node (for example
	// "wss://edge-3.example.com"); a token must list it. Required.
	Addr string
	// NodeID identifies the node in load reports. Zero: Addr.
	NodeID string
	// Line is the ISP line Addr serves. Zero: BGP.
	Line string
	// Region is where the node stands, reported to the gslb. Zero: unknown.
	Region string

	// LoadTable receives this node's load every ReportInterval while Run
	// runs. Nil: Run reports nothing.
	LoadTable loadtable.Table
	// Online receives this node's viewers per room, once a second while
	// they change, while Run runs. Nil: LoadTable, when it is also an
	// OnlineTable.
	Online loadtable.OnlineTable
	// ReportInterval is how often load is reported while it changes.
	// Zero: the gslb reporter's default (5 ms).
	ReportInterval time.Duration
	// ReportMaxInterval is the longest time between two reports while the
	// load does not change. Zero: the gslb reporter's default (250 ms);
	// below ReportInterval: every ReportInterval, changed or not.
	ReportMaxInterval time.Duration
	// CPU returns the node's CPU use (0..1) for load reports. Nil: 0.
	CPU func() float64

	// MaxConns caps connections; handshakes beyond it get 503
	// over_capacity. Zero: unlimited.
	MaxConns int
	// MinProtocol is the oldest client protocol (the handshake's proto
	// parameter, wire.Protocol; absent is 1) the edge accepts: older ones
	// get 426 protocol_unsupported naming it. Zero: 1, every client.
	MinProtocol int
	// ConnectRate is how many new connections a second the node takes
	// (a token bucket holding ConnectBurst); beyond, a handshake gets 503
	// connect_rate with a jittered Retry-After of 1-3 s. Zero: 5,000;
	// negative: unlimited.
	ConnectRate float64
	// ConnectBurst is the bucket's size. Zero: ConnectRate.
	ConnectBurst int
	// MaxConnsPerUser caps one user's connections on this node; beyond,
	// 429 too_many_conns (close 4429 after a hello). Zero: 8; negative:
	// unlimited.
	MaxConnsPerUser int
	// MaxRoomConns caps one room's connections on this node; beyond, 503
	// room_full (close 4503 after a hello), and the client tries its next
	// edge address. Zero: unlimited.
	MaxRoomConns int
	// RateLimit applies the process's rate-limit rules to the handshake
	// (per client address and node-wide: a browser's token comes after
	// the upgrade), before any other check, with the coded 429
	// rate_limited. Nil: none. The connect-rate bucket and the per-user
	// and per-room caps apply either way.
	RateLimit *ratelimit.Limiter
	// TrustedProxies are the balancers (addresses or CIDRs) whose
	// X-Forwarded-For gives the client address the rate limiter counts.
	// Zero: none; the peer is the client.
	TrustedProxies []string
	// MinGiftValue is the lowest total value (Value × max(Count, 1)) of a
	// gift that is pushed; cheaper gifts reach viewers through segments
	// only. System messages are always pushed. Zero: every gift.
	MinGiftValue int64
	// MergeWindow is the shortest time between two frames of a room;
	// messages arriving within a window share a frame. Zero: 55 ms. Values
	// below 50 ms are rejected.
	MergeWindow time.Duration
	// QueueSize is how many frames a connection's socket may hold
	// unwritten (the kernel's buffer full); one more closes it with
	// CloseResume. Zero: 64.
	QueueSize int
	// RingSize is how many recent pushable messages a room keeps for
	// resuming clients; older ones are read back from the store. Zero: 4096.
	RingSize int
	// ReadBlock is how long one store read waits for new entries. Zero: 1 s.
	ReadBlock time.Duration

	// PingInterval is how often each connection is pinged. Zero: 30 s.
	PingInterval time.Duration
	// PongGrace: a connection that sends nothing (not even a pong) for
	// PingInterval + PongGrace is dead and closed, and everything it held
	// released — a live client answers each ping within the grace. Zero:
	// 5 s.
	PongGrace time.Duration
	// TokenGrace is how long a connection lives past its token's expiry
	// without a fresh token sent in-band; then it is closed with 4401 (the
	// client fetches a new entry and reconnects with last). The edge asks
	// for one (a tokenAsk text frame) two ping intervals before the
	// expiry. Zero: 30 s.
	TokenGrace time.Duration
	// WriteTimeout bounds the blocking writes: a catch-up, the 101, a TLS
	// connection's writer; a client that cannot take them within it is
	// dropped. Live frames to a plain socket never block (QueueSize bounds
	// them). Zero: 10 s.
	WriteTimeout time.Duration
	// ReadLimit is the largest message a client may send, in bytes. Zero: 4 KB.
	ReadLimit int64
	// DrainPeriod is how long Shutdown spreads closing connections over,
	// so that clients don't all reconnect at once. Zero: 10 s.
	DrainPeriod time.Duration
	// Events says which rooms are live: a handshake for another room is
	// refused (404 no_such_room, 409 room_not_live; close codes 4404, 4409
	// after a hello), and when a room's event ends its connections are
	// closed with CloseRoomEnded and its hub goes. Nil: every room (tests
	// of the fan-out alone).
	Events *event.Directory
	// Bans are the operators' bans (read only: the ingest purges them). A
	// banned user's handshake is refused (403 banned; close CloseBanned
	// after a hello) and, within BanReload of the ban, their open
	// connections are closed with CloseBanned. Nil: nobody is banned here.
	Bans ban.Store
	// BanReload is how often the bans' version is polled (one GET; the
	// bans are read only when it moved). Zero: 500 ms, so that a ban
	// written on another node closes the connections here within 1 s,
	// the poll's wait and the read included.
	BanReload time.Duration
	// HelloTimeout is how long a connection without an Authorization
	// header (a browser's) may take to send its first frame, the token;
	// an unauthenticated socket is closed with 4408 after it. A socket an
	// epoll loop owns waits there, timed by Clock (within an eighth of
	// the timeout); a TLS one on a goroutine, by a read deadline. Zero: 5 s.
	HelloTimeout time.Duration
	// MaxHelloWaits caps the upgraded sockets waiting for their hello at
	// once; beyond, a handshake without an Authorization header gets 503
	// hello_waits (Retry-After 1-3 s). Zero: 10,000; negative: unlimited.
	MaxHelloWaits int
	// MaxHelloWaitsPerAddr caps them per client address (the balancer's
	// forwarded address where TrustedProxies lists it); beyond, 429
	// hello_waits_addr (Retry-After 1-3 s). Zero: 256; negative: unlimited.
	MaxHelloWaitsPerAddr int
	// ReportRate bounds what a connection's counter reports may add to
	// the client metrics ({"drops":N,"held":N}, the two summed): a client
	// cannot drop or hold back more than it was sent or typed. Each
	// connection earns ReportRate a second, up to ReportWindow's worth
	// (a full window at connect, so that what an SDK carries over from
	// its previous connection passes); a report above what it has left is
	// refused whole and counted in
	// danmaku_edge_client_reports_refused_total{reason="over_bound"}.
	// Once a report carried a million drops. Zero: 200 a second.
	ReportRate float64
	// ReportWindow is how much unreported time a connection's bound
	// accumulates at most. Zero: 1 minute.
	ReportWindow time.Duration
	// ReportEvery is the least time between two counter reports of one
	// connection: a report sooner after the last one taken is refused and
	// counted (reason "too_often"); a frame with a token alone is not a
	// report. Zero: 5 s (the SDKs report every 10 s).
	ReportEvery time.Duration
	// AllowOrigins are the web origins whose pages may connect: a
	// handshake with another Origin is refused (403, code "origin"). A
	// handshake without Origin is a native client and always allowed. The
	// same list as the gslb's and the ingest's CORS origins. Zero: no page
	// may connect.
	AllowOrigins httpx.Origins

	// Clock stamps load reports and tells the time of what is counted in
	// it: token expiries, the connect rate, a plain socket's hello
	// timeout, the span a client's counter report may cover, the frames
	// a client may send (clientMsgBurst), how far ahead of the stream a
	// last id may be. Nil: real clock. Network
	// deadlines, pings and the merge window use real time, as the network
	// does.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Nil: a private registry. When it is
	// also a prometheus.Gatherer, Handler serves it on /metrics, unless
	// NoMetricsRoute.
	Registerer prometheus.Registerer
	// NoMetricsRoute keeps /metrics off Handler (it answers 404
	// not_found): the process serves its metrics on a listener of its
	// own, not on the port clients reach. False: as Registerer says.
	NoMetricsRoute bool
}

// check refuses a Config missing what it requires or with a negative
// field.
func (cfg Config) check() error {
	switch {
	case cfg.Store == nil:
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	case cfg.Verifier == nil:
		return fmt.Errorf("%w: Verifier is required", ErrInvalidConfig)
	case cfg.Addr == "":
		return fmt.Errorf("%w: Addr is required", ErrInvalidConfig)
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"MaxConns", cfg.MaxConns < 0},
		{"MinProtocol", cfg.MinProtocol < 0},
		{"ConnectBurst", cfg.ConnectBurst < 0},
		{"MaxRoomConns", cfg.MaxRoomConns < 0},
		{"MinGiftValue", cfg.MinGiftValue < 0},
		{"MergeWindow", cfg.MergeWindow < 0},
		{"QueueSize", cfg.QueueSize < 0},
		{"RingSize", cfg.RingSize < 0},
		{"ReadBlock", cfg.ReadBlock < 0},
		{"ReportInterval", cfg.ReportInterval < 0},
		{"ReportMaxInterval", cfg.ReportMaxInterval < 0},
		{"PingInterval", cfg.PingInterval < 0},
		{"PongGrace", cfg.PongGrace < 0},
		{"TokenGrace", cfg.TokenGrace < 0},
		{"WriteTimeout", cfg.WriteTimeout < 0},
		{"ReadLimit", cfg.ReadLimit < 0},
		{"DrainPeriod", cfg.DrainPeriod < 0},
		{"HelloTimeout", cfg.HelloTimeout < 0},
		{"BanReload", cfg.BanReload < 0},
		{"ReportRate", cfg.ReportRate < 0},
		{"ReportWindow", cfg.ReportWindow < 0},
		{"ReportEvery", cfg.ReportEvery < 0},
	} {
		if f.bad {
			return fmt.Errorf("%w: %s must not be negative", ErrInvalidConfig, f.name)
		}
	}
	return nil
}

// withDefaults checks cfg and fills in its zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.Addr
	}
	if cfg.MergeWindow == 0 {
		cfg.MergeWindow = defaultMergeWindow
	}
	if cfg.MergeWindow < minMergeWindow {
		return cfg, fmt.Errorf("%w: MergeWindow %v is below %v", ErrInvalidConfig, cfg.MergeWindow, minMergeWindow)
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = defaultQueueSize
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = defaultRingSize
	}
	if cfg.ReadBlock == 0 {
		cfg.ReadBlock = defaultReadBlock
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = defaultPingInterval
	}
	if cfg.ConnectRate == 0 {
		cfg.ConnectRate = defaultConnectRate
	}
	if cfg.MaxConnsPerUser == 0 {
		cfg.MaxConnsPerUser = defaultMaxConnsPerUser
	}
	if cfg.PongGrace == 0 {
		cfg.PongGrace = defaultPongGrace
	}
	if cfg.TokenGrace == 0 {
		cfg.TokenGrace = defaultTokenGrace
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = defaultWriteTimeout
	}
	if cfg.ReadLimit == 0 {
		cfg.ReadLimit = defaultReadLimit
	}
	if cfg.BanReload == 0 {
		cfg.BanReload = defaultBanReload
	}
	if cfg.DrainPeriod == 0 {
		cfg.DrainPeriod = defaultDrainPeriod
	}
	if cfg.HelloTimeout == 0 {
		cfg.HelloTimeout = defaultHelloTimeout
	}
	if cfg.MaxHelloWaits == 0 {
		cfg.MaxHelloWaits = defaultMaxHelloWaits
	}
	if cfg.MaxHelloWaitsPerAddr == 0 {
		cfg.MaxHelloWaitsPerAddr = defaultMaxHelloWaitsPerAddr
	}
	if cfg.ReportRate == 0 {
		cfg.ReportRate = defaultReportRate
	}
	if cfg.ReportWindow == 0 {
		cfg.ReportWindow = defaultReportWindow
	}
	if cfg.ReportEvery == 0 {
		cfg.ReportEvery = defaultReportEvery
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}
