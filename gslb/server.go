package gslb

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/wire"
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
	// SegmentMs is the segment duration of rooms whose event sets none.
	// Zero: 1000.
	SegmentMs int64
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Clock tells the time. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Server serves GET /v1/entry.
type Server struct {
	cfg     ServerConfig
	entries *prometheus.CounterVec
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
		Help: "Entry requests by result code (ok or the error code).",
	}, []string{"code"})
	if err := cfg.Registerer.Register(s.entries); err != nil {
		return nil, err
	}
	return s, nil
}

// TimePath answers the store clock's time, for clients refining their
// clock offset after a join whose round trip was long (a busy gslb at show
// start): {"server_time_ms": N}. It needs no ticket and costs no backend
// call.
const TimePath = "/v1/time"

// Register adds the entry and time routes to r.
func (s *Server) Register(r gin.IRoutes) {
	r.GET("/v1/entry", s.entry)
	r.GET(TimePath, s.time)
}

func (s *Server) time(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"server_time_ms": s.cfg.ServerClock.Now().UnixMilli()})
}

func (s *Server) fail(c *gin.Context, e *httpx.Error) {
	s.entries.WithLabelValues(e.Code).Inc()
	httpx.Abort(c, e)
}

func (s *Server) entry(c *gin.Context) {
	room := c.Query("room")
	if !wire.ValidRoom(room) {
		s.fail(c, httpx.Errorf(http.StatusBadRequest, "bad_room", "room must be 1-64 characters of A-Z a-z 0-9 _ -"))
		return
	}
	segmentMs := s.cfg.SegmentMs
	if s.cfg.Events != nil {
		// Before the ticket: an unknown room costs nothing but a map read.
		if e := s.cfg.Events.Check(room); e != nil {
			s.fail(c, e)
			return
		}
		if v, _ := s.cfg.Events.Lookup(room); v.Room.SegmentMs != 0 {
			segmentMs = v.Room.SegmentMs
		}
	}
	ticket := httpx.BearerToken(c, "ticket")
	if ticket == "" {
		s.fail(c, httpx.Errorf(http.StatusUnauthorized, "no_ticket", "a business ticket is required (Authorization: Bearer or ?ticket=)"))
		return
	}
	t, err := s.cfg.Tickets.Verify(ticket)
	if err != nil {
		s.fail(c, httpx.Errorf(http.StatusUnauthorized, "bad_ticket", "ticket rejected"))
		return
	}
	ip, _ := netip.ParseAddr(c.ClientIP())
	alloc, err := s.cfg.Allocator.Allocate(t.Subject, ip)
	if err != nil {
		e := httpx.Errorf(http.StatusServiceUnavailable, "no_nodes", "no healthy node; retry shortly")
		e.RetryAfter = time.Second
		s.fail(c, e)
		return
	}
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
	if err != nil {
		e := httpx.Errorf(http.StatusServiceUnavailable, "token_unavailable", "token secrets not loaded yet; retry shortly")
		e.RetryAfter = time.Second
		s.fail(c, e)
		return
	}
	s.entries.WithLabelValues("ok").Inc()
	c.JSON(http.StatusOK, Entry{
		Room:           room,
		User:           t.Subject,
		Role:           t.Role,
		Ingest:         alloc.Ingest,
		Edge:           alloc.Edge,
		CDN:            s.cfg.CDN,
		Token:          tok,
		TokenExpiresMs: exp.UnixMilli(),
		ServerTimeMs:   s.cfg.ServerClock.Now().UnixMilli(),
		SegmentMs:      segmentMs,
		PublishDelayMs: s.cfg.PublishDelay.Milliseconds(),
	})
}
