package sdk

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"danmaku/sdk/wire"
)

// Message is one message of the merged stream. It is wire.Message, aliased so
// that users need not import danmaku/sdk/wire.
type Message = wire.Message

// Kind says what a message is.
type Kind = wire.Kind

// Message kinds.
const (
	// KindBarrage is a viewer's comment.
	KindBarrage = wire.KindBarrage
	// KindGift is a paid gift.
	KindGift = wire.KindGift
	// KindSystem is a host/admin announcement or a site-wide broadcast.
	KindSystem = wire.KindSystem
)

// Clock tells the time. Any type with a Now method will do.
type Clock interface {
	Now() time.Time
}

// systemClock is the Clock of a nil Config.Clock or RenderConfig.Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// clockOr returns c, or the system clock when c is nil.
func clockOr(c Clock) Clock {
	if c == nil {
		return systemClock{}
	}
	return c
}

// defaultIdleConnTimeout is how long the default client keeps an idle
// connection: below every server's idle timeout (60 s at the gslb's load
// balancer, 90 s at the nodes), so that the client closes it first. With
// net/http's 90 s, a node closing a connection idle for 90 s as the client
// took it for a comment failed the POST with EOF (net/http retries only
// idempotent requests), and the comment went to a fallback ingest, which
// answered 421 not_primary, and came back a second later.
const defaultIdleConnTimeout = 50 * time.Second

// defaultTransport is the default client's, one pool shared by every Client
// of the process (as http.DefaultTransport would be).
var defaultTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.IdleConnTimeout = defaultIdleConnTimeout
	return t
}()

// Defaults.
const (
	defaultHTTPTimeout     = 10 * time.Second
	defaultMessageBuffer   = 1024
	defaultSendQueue       = 5
	defaultSendInterval    = 1200 * time.Millisecond
	defaultSendDedupWindow = 10 * time.Second
	defaultMaxTextRunes    = 60
	defaultSeenIDs         = 100_000
	defaultSeenWindow      = 2 * time.Minute
	defaultRejoinJitter    = 3 * time.Second
	defaultFirstJoinJitter = 3 * time.Second
	defaultPollRetry       = 200 * time.Millisecond
	defaultPollBackoffMax  = 5 * time.Second
	defaultFarBehind       = 10 * time.Second
	// The edge pings every 30 s; two missed pings and a margin mean the
	// connection is dead even if TCP has not noticed.
	defaultEdgeReadTimeout = 75 * time.Second

	// fakeTick bounds each sleep when Config.Clock is not the system clock:
	// a fake clock cannot wake a sleeper, so waits re-read it this often.
	fakeTick = 2 * time.Millisecond
)

// Config configures a Client. EntryURL, Room and Ticket are required; every
// other field has a default named on it.
type Config struct {
	// EntryURL is the base URL of the entry endpoint (gslb), without the
	// /v1/entry path, e.g. "https://entry.example.com".
	EntryURL string
	// Room is the room to join.
	Room string
	// Ticket is the business ticket sent as "Authorization: Bearer" to the
	// entry endpoint.
	Ticket string

	// HTTPClient makes every HTTP request (entry, CDN, ingest); the
	// WebSocket dials on its own, honouring the proxy environment. Nil: a
	// client with a 10 s timeout that closes a connection idle for 50 s.
	// An app's own client should close idle connections before the
	// servers do (60 s at the gslb's load balancer, 90 s at every node):
	// a POST sent on a connection the server is closing fails, and is not
	// retried by net/http.
	HTTPClient *http.Client
	// Logger receives what goes wrong. Nil: slog.Default().
	Logger *slog.Logger
	// Clock is the local clock; the server time is derived from it. Nil: the
	// system clock. Any other clock (even one that reads the system time)
	// is re-read every few milliseconds while the client waits, so a fake
	// clock that is moved is noticed.
	Clock Clock

	// MessageBuffer is the capacity of the Messages channel. Zero: 1024.
	MessageBuffer int
	// SendQueue is how many comments may wait for the send interval; a new
	// one drops the oldest. Zero: 5.
	SendQueue int
	// SendInterval is the least time between two posted comments. Zero: 1.2 s.
	SendInterval time.Duration
	// SendDedupWindow is how long the same text is answered with success
	// without being sent again. Zero: 10 s; negative: no de-duplication.
	SendDedupWindow time.Duration
	// MaxTextRunes is the longest comment Send accepts, in characters after
	// whitespace is collapsed. Zero: 60 (the ingest's limit).
	MaxTextRunes int

	// SeenIDs bounds how many delivered ids are remembered for
	// de-duplication. Zero: 100,000.
	SeenIDs int
	// SeenWindow is how long a delivered id is remembered. Zero: 2 minutes.
	SeenWindow time.Duration
	// TakedownIDs bounds how many taken-down ids are remembered, so that a
	// later copy of a taken-down message is never delivered; the oldest are
	// forgotten first (there is no age bound). Zero: 10,000.
	TakedownIDs int

	// FirstJoinJitter is the longest random wait before the first join:
	// at show start a push notification opens millions of apps within a
	// second, and the gslb must see them spread over a few. Zero: 3 s;
	// negative: none (tests, a single viewer that must not wait).
	FirstJoinJitter time.Duration
	// RejoinJitter is the longest random wait before re-fetching the entry
	// on a mass reconnect (an edge draining, a token rejected, every edge
	// unreachable), so that a whole room does not hit the gslb in one
	// instant. Zero: 3 s; negative: none.
	RejoinJitter time.Duration

	// PollRetry is how long the poller waits before asking again for a due
	// second that answered 404. Zero: 200 ms.
	PollRetry time.Duration
	// PollBackoffMax caps the back-off after server or network errors of
	// the CDN. Zero: 5 s.
	PollBackoffMax time.Duration
	// FarBehind is how far behind live the poller may fall before it jumps
	// to live. Zero: 10 s; negative: never jump.
	FarBehind time.Duration

	// NoEdge disables the WebSocket: the client only polls segments. Zero:
	// the client holds the edge connection.
	NoEdge bool
	// EdgeReadTimeout is how long the edge connection may stay silent (no
	// frame, no ping) before it is dropped and redialled. Zero: 75 s.
	EdgeReadTimeout time.Duration

	// Playhead, when set, is the app's video playhead (PlayheadClock): each
	// comment and announcement is sent with it, and — when the entry allows
	// sync — each message is held until the playhead reaches the sender's
	// (sdk/playhead.go has the rules: late, seeks, stalls, a missing
	// clock). Nil: wall-clock mode, as before playheads.
	Playhead PlayheadClock

	// Render, when set, is the render queue the app shows messages
	// through; its drops go into the counter reports sent to the edge,
	// which operators see as client render drops. Nil: drops reported as 0.
	Render *RenderQueue
	// ReportInterval is how often the client reports its counters (render
	// drops, held-back sends, segments fetched and first-poll hits, and the
	// delivered barrage by latency) over the edge connection. Zero: 10 s;
	// negative: never.
	ReportInterval time.Duration
}

// Configuration errors.
var (
	// ErrConfig is the parent of every error New returns.
	ErrConfig = errors.New("sdk: invalid config")
)

func (cfg *Config) applyDefaults() error {
	if cfg.EntryURL == "" {
		return fmt.Errorf("%w: EntryURL is required", ErrConfig)
	}
	if u, err := url.Parse(cfg.EntryURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: EntryURL %q is not an http(s) URL", ErrConfig, cfg.EntryURL)
	}
	if !wire.ValidRoom(cfg.Room) {
		return fmt.Errorf("%w: Room %q is not a valid room id", ErrConfig, cfg.Room)
	}
	if cfg.Ticket == "" {
		return fmt.Errorf("%w: Ticket is required", ErrConfig)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout, Transport: defaultTransport}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clockOr(cfg.Clock)
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MessageBuffer", &cfg.MessageBuffer, defaultMessageBuffer},
		{"SendQueue", &cfg.SendQueue, defaultSendQueue},
		{"MaxTextRunes", &cfg.MaxTextRunes, defaultMaxTextRunes},
		{"SeenIDs", &cfg.SeenIDs, defaultSeenIDs},
		{"TakedownIDs", &cfg.TakedownIDs, defaultTakedownIDs},
	} {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s is negative", ErrConfig, f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"SendInterval", &cfg.SendInterval, defaultSendInterval},
		{"SeenWindow", &cfg.SeenWindow, defaultSeenWindow},
		{"PollRetry", &cfg.PollRetry, defaultPollRetry},
		{"PollBackoffMax", &cfg.PollBackoffMax, defaultPollBackoffMax},
		{"EdgeReadTimeout", &cfg.EdgeReadTimeout, defaultEdgeReadTimeout},
	} {
		if *f.v < 0 {
			return fmt.Errorf("%w: %s is negative", ErrConfig, f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	// Negative means "off" for these five; keep it, the users check for > 0.
	if cfg.FirstJoinJitter == 0 {
		cfg.FirstJoinJitter = defaultFirstJoinJitter
	}
	if cfg.SendDedupWindow == 0 {
		cfg.SendDedupWindow = defaultSendDedupWindow
	}
	if cfg.RejoinJitter == 0 {
		cfg.RejoinJitter = defaultRejoinJitter
	}
	if cfg.FarBehind == 0 {
		cfg.FarBehind = defaultFarBehind
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = defaultReportInterval
	}
	if cfg.FarBehind > 0 && cfg.FarBehind < 2*time.Second {
		// Within two seconds of live is where a healthy poller always is.
		return fmt.Errorf("%w: FarBehind %v is below 2s", ErrConfig, cfg.FarBehind)
	}
	if cfg.PollBackoffMax < cfg.PollRetry {
		return fmt.Errorf("%w: PollBackoffMax %v is below PollRetry %v", ErrConfig, cfg.PollBackoffMax, cfg.PollRetry)
	}
	return nil
}
