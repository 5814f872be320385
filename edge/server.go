package edge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gobwas/ws"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/backoff"
	"danmaku/internal/ban"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/sdk/wire"
)

// Path is the WebSocket endpoint: GET /v1/ws?token=<dynamic token>&last=<id>.
// The token may come as "Authorization: Bearer" instead; last is optional.
const Path = "/v1/ws"

// ErrRunning is returned by a second call of Run.
var ErrRunning = errors.New("edge: Run already called")

// Server is an edge node: it accepts viewers' WebSocket connections and
// pushes their rooms' live messages. Create it with New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	up      ws.HTTPUpgrader
	handler http.Handler
	fanBuf  connBufs

	// poll owns the plain TCP sockets (Linux): started with the first
	// connection, stopped at the end of Shutdown.
	pollOnce sync.Once
	poll     *poller
	pollErr  error

	// ctx bounds hubs, catch-up reads and the load reporter; Shutdown
	// cancels it once every connection is gone.
	ctx    context.Context
	cancel context.CancelFunc

	conns    atomic.Int64 // connections, handshakes in progress included
	draining atomic.Bool
	connects *connectBucket // admission: new connections a second
	siteOnce sync.Once      // the site reader starts with the first hub
	pingOnce sync.Once      // so does the pinger
	users    *userConns     // admission: connections per user
	hellos   *helloWaits    // admission: sockets waiting for a hello
	bans     *ban.List      // nil: no bans (Config.Bans)
	running  atomic.Bool
	wg       sync.WaitGroup // hub goroutines and the load reporter
	// reporter is Run's load reporter (danmaku_edge_load_report_age_seconds).
	reporter atomic.Pointer[loadtable.Reporter]

	mu   sync.Mutex
	hubs map[string]*hub

	shutOnce sync.Once
	stopping chan struct{} // closed when Shutdown begins
	stopped  chan struct{} // closed when Shutdown has finished
	shutErr  error         // written before stopped is closed
}

// New checks cfg, applies its defaults and returns a Server. It starts no
// goroutine: hubs start with their room's first connection, and Run runs
// the load reporter.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		hubs:     map[string]*hub{},
		stopping: make(chan struct{}),
		stopped:  make(chan struct{}),
		connects: newConnectBucket(cfg.ConnectRate, cfg.ConnectBurst),
		users:    &userConns{max: cfg.MaxConnsPerUser},
		hellos:   &helloWaits{max: int64(cfg.MaxHelloWaits), addrs: &userConns{max: cfg.MaxHelloWaitsPerAddr}},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	reg := cfg.Registerer
	var gatherer prometheus.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	}
	if cfg.NoMetricsRoute {
		gatherer = nil
	}
	if s.m, err = newMetrics(reg, s); err != nil {
		return nil, err
	}
	if s.bans, err = newBans(cfg, reg); err != nil {
		return nil, err
	}

	// Bounds the 101 write; reading the request is bounded by the HTTP
	// server's ReadHeaderTimeout. Origins and versions are checked before
	// (checkUpgrade), with coded answers.
	s.up = ws.HTTPUpgrader{Timeout: cfg.WriteTimeout}

	e := httpx.NewEngine(httpx.EngineConfig{
		Role: "edge",
		// No edge route reads a body: the handshake is a GET, /healthz and
		// /metrics too. A declared body is refused and the socket closed at
		// once instead of waiting for bytes that may never come.
		NoBody:         true,
		Logger:         cfg.Logger,
		Gatherer:       gatherer,
		TrustedProxies: cfg.TrustedProxies,
		// A draining node fails its health check so that the load
		// balancer stops sending it new clients.
		Healthy: func() error {
			if s.draining.Load() {
				return ErrDraining
			}
			if !s.verifierReady() {
				return auth.ErrNotReady
			}
			return nil
		},
	})
	if cfg.RateLimit != nil {
		e.GET(Path, cfg.RateLimit.Handler(nil), s.handleWS)
	} else {
		e.GET(Path, s.handleWS)
	}
	s.handler = e
	return s, nil
}

// Handler returns the HTTP handler: the WebSocket endpoint (Path), /healthz
// and /metrics (unless Config.NoMetricsRoute). Serve it with a server whose WriteTimeout is zero (see
// httpx.NewServer): upgraded connections set their own deadlines.
func (s *Server) Handler() http.Handler { return s.handler }

// reject answers a refused handshake with the coded error and counts it.
func (s *Server) reject(c *gin.Context, status int, code, msg string) {
	s.rejectRetry(c, status, code, msg, 0)
}

// rejectRetry is reject with a Retry-After (0: none).
func (s *Server) rejectRetry(c *gin.Context, status int, code, msg string, retry time.Duration) {
	s.m.rejects.WithLabelValues(code).Inc()
	e := httpx.Errorf(status, code, "%s", msg)
	e.RetryAfter = retry
	httpx.Abort(c, e)
}

// newSock hands an upgraded socket to an epoll loop, or to a goSock when
// no loop can own it (TLS, wrapped listeners, other systems). br holds
// what the client sent past the handshake.
func (s *Server) newSock(nc net.Conn, br *bufio.Reader, c *conn) sock {
	if p := s.poller(); p != nil {
		if ps := p.add(nc, pre(br), c); ps != nil {
			return ps
		}
	}
	return newGoSock(nc, br, c)
}

// poller returns the epoll loops, started with the first socket; nil
// when they cannot start.
func (s *Server) poller() *poller {
	s.pollOnce.Do(func() {
		// Loops wake at least this often to time out hello waits.
		tick := min(max(s.cfg.HelloTimeout/8, time.Millisecond), time.Second)
		if s.poll, s.pollErr = newPoller(s.cfg.Clock.Now, tick); s.pollErr != nil {
			s.log.Warn("edge: no epoll loops; every socket gets goroutines", "err", s.pollErr)
		}
	})
	if s.pollErr != nil {
		return nil
	}
	return s.poll
}

// pre is what the client sent past the handshake, read into br already.
func pre(br *bufio.Reader) []byte {
	if br == nil || br.Buffered() == 0 {
		return nil
	}
	b, _ := br.Peek(br.Buffered())
	return b
}

// pingLoop ticks every connection a few times per ping interval (one
// timer for the node, none per connection): each is pinged once an
// interval, and closed when it leaves a ping unanswered for the grace.
func (s *Server) pingLoop() {
	defer s.wg.Done()
	// Fine enough that a ping goes out within a quarter interval of its
	// time and a dead client is closed within half a grace of its.
	t := time.NewTicker(max(min(s.cfg.PingInterval/4, s.cfg.PongGrace/2), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			for _, h := range s.hubList() {
				h.mu.Lock()
				conns := s.fanBuf.get(h.conns)
				h.mu.Unlock()
				for _, c := range conns {
					c.tick(now)
				}
				s.fanBuf.put(conns)
			}
		}
	}
}

// acquire returns the room's hub, starting it if needed, and holds it until
// release.
func (s *Server) acquire(room string) (*hub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return nil, ErrDraining
	}
	h := s.hubs[room]
	if h == nil {
		h = newHub(s, room)
		s.hubs[room] = h
		s.wg.Add(1)
		go h.run()
		s.startSite()
		s.pingOnce.Do(func() {
			s.wg.Add(1)
			go s.pingLoop()
		})
	}
	h.refs++
	return h, nil
}

// release lets go of a hub; the last release stops it.
func (s *Server) release(h *hub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.refs--
	if h.refs == 0 {
		if s.hubs[h.room] == h {
			delete(s.hubs, h.room)
		}
		h.cancel()
	}
}

// hubList returns the hubs, for a walk over them without the lock.
func (s *Server) hubList() []*hub {
	s.mu.Lock()
	defer s.mu.Unlock()
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	return hubs
}

func (s *Server) roomCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hubs)
}

// minGift is room's push threshold: its event's setting, else MinGiftValue.
func (s *Server) minGift(room string) int64 {
	if s.cfg.Events != nil {
		if v, ok := s.cfg.Events.Lookup(room); ok && v.Room.MinGiftValue != 0 {
			return v.Room.MinGiftValue
		}
	}
	return s.cfg.MinGiftValue
}

// pushable reports whether m goes out over the edge: system messages
// always, gifts when their total value reaches lo (the room's minGift).
func pushable(m *wire.Message, lo int64) bool {
	if m.IsTakedown() {
		return true // a takedown reaches every connected viewer
	}
	switch m.Kind {
	case wire.KindSystem:
		return true
	case wire.KindGift:
		if lo == 0 || m.Value >= lo {
			return true
		}
		if m.Value <= 0 {
			return false
		}
		// Value × max(Count, 1) ≥ lo, without overflowing.
		n := int64(max(m.Count, 1))
		return m.Value >= (lo+n-1)/n
	}
	return false
}

// Load returns the node's load for the gslb: connections, capacity and
// whether it drains.
func (s *Server) Load() loadtable.NodeLoad {
	l := loadtable.NodeLoad{
		ID:       s.cfg.NodeID,
		Kind:     loadtable.KindEdge,
		Addr:     s.cfg.Addr,
		Line:     s.cfg.Line,
		Region:   s.cfg.Region,
		Conns:    int(s.conns.Load()),
		Capacity: s.cfg.MaxConns,
		Draining: s.draining.Load(),
		At:       s.cfg.Clock.Now(),
	}
	if s.cfg.CPU != nil {
		l.CPU = s.cfg.CPU()
	}
	return l
}

// OnlineRooms returns the viewers online per room on this node (rooms
// without any left out): what the room buckets of the ingest nodes follow.
func (s *Server) OnlineRooms() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	rooms := make(map[string]int, len(s.hubs))
	for room, h := range s.hubs {
		if n := h.online.Load(); n > 0 {
			rooms[room] = int(n)
		}
	}
	return rooms
}

// onlineTable is where the online counts go: Config.Online, else the load
// table when it is also an OnlineTable (both tables of package gslb are).
func (s *Server) onlineTable() loadtable.OnlineTable {
	if s.cfg.Online != nil {
		return s.cfg.Online
	}
	ot, _ := s.cfg.LoadTable.(loadtable.OnlineTable)
	return ot
}

// Run reports the node's load to Config.LoadTable (when set) until ctx is
// done or Shutdown is called, then drains as Shutdown does and returns when
// the drain has finished. The reporter keeps reporting Draining during the
// drain and removes the node from the table at its end.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	var (
		rep    *loadtable.Reporter
		online *loadtable.OnlineReporter
	)
	if s.cfg.LoadTable != nil {
		rep = &loadtable.Reporter{
			Table:       s.cfg.LoadTable,
			Interval:    s.cfg.ReportInterval,
			MaxInterval: s.cfg.ReportMaxInterval,
			Load:        s.Load,
			Now:         s.cfg.Clock.Now,
			Ready:       s.verifierReady,
		}
		s.reporter.Store(rep)
		if ot := s.onlineTable(); ot != nil {
			online = &loadtable.OnlineReporter{Table: ot, Node: s.cfg.NodeID, Rooms: s.OnlineRooms, Now: s.cfg.Clock.Now, Ready: s.verifierReady}
		}
	}
	// Every background loop is added under mu, and only before a drain
	// began: drain waits on wg, and an Add racing that Wait (a Shutdown
	// called as Run starts) is a data race and a loop nobody waits for.
	s.mu.Lock()
	if !s.draining.Load() {
		if rep != nil {
			s.wg.Go(func() { _ = rep.Run(s.ctx) })
		}
		if online != nil {
			s.wg.Go(func() { _ = online.Run(s.ctx) })
		}
		if s.cfg.Events != nil {
			s.wg.Go(func() { s.closeEndedRooms(s.ctx) })
		}
		if s.bans != nil {
			s.wg.Go(func() { s.watchBans(s.ctx) })
		}
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-s.stopping:
	}
	return s.Shutdown(context.Background())
}

// closeEndedRooms closes, every second, the connections of rooms whose
// event has ended: each client is told (CloseRoomEnded) and does not come
// back, and the room's hub goes with its last connection.
func (s *Server) closeEndedRooms(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.cfg.Events.Ready() {
			continue
		}
		s.mu.Lock()
		var ended []*hub
		for room, h := range s.hubs {
			if roomEnded(s.cfg.Events, room) {
				ended = append(ended, h)
			}
		}
		s.mu.Unlock()
		for _, h := range ended {
			for _, c := range h.snapshot() {
				c.kick(CloseRoomEnded, "room ended")
			}
		}
	}
}

// Shutdown drains the node (lame duck): it refuses new connections, marks
// itself Draining in load reports and fails /healthz, then closes the
// connections with CloseGoingAway in batches spread over DrainPeriod so that
// clients do not all reconnect at once. It returns when every connection is
// gone and every goroutine has stopped. When ctx ends first, the remaining
// connections are told to close at once and ctx's error is returned. Later
// calls wait for the first to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	first := false
	s.shutOnce.Do(func() { first = true })
	if !first {
		select {
		case <-s.stopped:
			return s.shutErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.shutErr = s.drain(ctx)
	close(s.stopped)
	return s.shutErr
}

func (s *Server) drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	s.mu.Unlock()
	close(s.stopping)

	// Every connection that registered before draining was set is in a
	// snapshot; every later one is refused by register.
	var all []*conn
	for _, h := range hubs {
		all = append(all, h.snapshot()...)
	}
	s.log.Info("edge: draining", "conns", len(all), "rooms", len(hubs), "period", s.cfg.DrainPeriod)
	// Shuffled so that each batch takes a slice of every room, not one
	// room's viewers all at once.
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	batches := drainBatches(len(all), drainSteps)
	forced := false
	for _, b := range batches {
		for _, c := range all[b[0]:b[1]] {
			c.kick(CloseGoingAway, "going away")
		}
		if !forced && b[1] < len(all) && !backoff.Sleep(ctx, s.cfg.DrainPeriod/time.Duration(len(batches))) {
			forced = true // out of time: close the rest at once
		}
	}

	var err error
	for s.conns.Load() > 0 {
		if !backoff.Sleep(ctx, 10*time.Millisecond) {
			err = fmt.Errorf("edge: shutdown: %d connections still closing: %w", s.conns.Load(), ctx.Err())
			break
		}
	}
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("edge: shutdown: %w", ctx.Err())
		}
	}
	if s.poll != nil {
		s.poll.stop()
	}
	s.log.Info("edge: drained", "err", err)
	return err
}

// drainBatches splits n connections into at most steps batches of nearly
// equal size, as [lo, hi) index pairs.
func drainBatches(n, steps int) [][2]int {
	steps = min(steps, n)
	out := make([][2]int, 0, steps)
	for i := range steps {
		out = append(out, [2]int{i * n / steps, (i + 1) * n / steps})
	}
	return out
}

// verifierReady reports whether the token verifier can check a token
// issued now (a Keyring after its first load); a verifier that cannot say
// is taken as ready.
func (s *Server) verifierReady() bool {
	if r, ok := s.cfg.Verifier.(interface{ Ready() bool }); ok {
		return r.Ready()
	}
	return true
}

// roomEnded says whether room's event has ended or is gone: not merely not
// live, since a room let in before its start by this node's clock
// (CheckIssued: the gslb's may run ahead) must not be closed as ended.
func roomEnded(d *event.Directory, room string) bool {
	v, ok := d.Lookup(room)
	return !ok || v.State == event.Ended
}
