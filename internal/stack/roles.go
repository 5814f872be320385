package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"danmaku/auth"
	"danmaku/edge"
	"danmaku/gslb"
	"danmaku/gslb/lines"
	"danmaku/ingest"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/hlsdemo"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/internal/objstore"
	"danmaku/internal/origin"
	"danmaku/internal/redisx"
	"danmaku/internal/rules"
	"danmaku/internal/sdkweb"
	"danmaku/internal/stream"
	"danmaku/internal/sysload"
	"danmaku/internal/tlsx"
	"danmaku/slicer"
)

// The steps of New, in its order: the configuration's defaults, the
// backends', the listeners and the URLs they give, the keys and the rate
// limits the roles share, then one constructor per role.

// withDefaults fills c's zero fields and checks the others.
func (c *Config) withDefaults() error {
	if len(c.Roles) == 0 {
		c.Roles = AllRoles
	}
	for _, r := range c.Roles {
		switch r {
		case RoleGSLB, RoleIngest, RoleEdge, RoleSlicer, RoleOrigin:
		default:
			return fmt.Errorf("stack: unknown role %q", r)
		}
	}
	def := func(p *string, d string) {
		if *p == "" {
			*p = d
		}
	}
	def(&c.GSLBAddr, DefaultGSLBAddr)
	def(&c.IngestAddr, DefaultIngestAddr)
	def(&c.EdgeAddr, DefaultEdgeAddr)
	def(&c.OriginAddr, DefaultOriginAddr)
	def(&c.SlicerAddr, DefaultSlicerAddr)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.devPublic() {
		c.devKeys()
		c.Events = append(c.Events, DemoEvent(time.Now().Add(-time.Minute)))
	}
	if err := c.checkKeys(); err != nil {
		return err
	}
	for _, f := range c.tlsFiles() {
		if (f.cert == "") != (f.key == "") {
			return fmt.Errorf("stack: %s TLS: %w (%sTLSCert %q, %sTLSKey %q)", f.role, tlsx.ErrIncomplete, f.field, f.cert, f.field, f.key)
		}
	}
	if c.EdgeDrain == 0 {
		c.EdgeDrain = 10 * time.Second
		if c.Dev {
			c.EdgeDrain = time.Second
		}
	}
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return nil
}

// withDefaults fills b's nil stores with in-memory ones (the objects in
// dataDir when set). The gift backlog is the in-memory backlog when b had
// none, shared by this process's slicer and ingest; nil otherwise.
func (b *Backends) withDefaults(dataDir string) (ingest.GiftBacklog, error) {
	sh := &b.Shared
	if sh.Streams == nil {
		sh.Streams = stream.NewMemoryStore(nil)
	}
	if sh.Objects == nil {
		if dataDir != "" {
			d, err := objstore.NewDirStore(dataDir)
			if err != nil {
				return nil, err
			}
			sh.Objects = d
		} else {
			sh.Objects = objstore.NewMemoryStore()
		}
	}
	if sh.Load == nil {
		sh.Load = loadtable.NewMemoryTable()
	}
	if sh.Secrets == nil {
		sh.Secrets = auth.NewMemorySecrets()
	}
	if sh.Events == nil {
		sh.Events = event.NewMemoryStore()
	}
	var giftBacklog ingest.GiftBacklog
	if b.Slicer.Backlog == nil {
		mb := slicer.NewMemoryBacklog(nil)
		b.Slicer.Backlog, giftBacklog = mb, mb
	}
	if b.Ingest.Lotteries == nil {
		b.Ingest.Lotteries = ingest.NewMemoryLotteryStore(nil)
	}
	if sh.Bans == nil {
		// One store for the process's roles: the ingest's operator API
		// writes it, the edge and the gslb read it.
		sh.Bans = ingest.NewMemoryBanStore()
	}
	if sh.Rules == nil {
		sh.Rules = rules.NewMemoryStore()
	}
	return giftBacklog, nil
}

// newStack makes the Stack with its registry and, for the roles that read
// them, the view of the events.
func newStack(cfg Config) (*Stack, error) {
	s := &Stack{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry(), URLs: map[string]string{}, cpu: sysload.New(0)}
	if cfg.has(RoleGSLB) || cfg.has(RoleIngest) || cfg.has(RoleEdge) || cfg.has(RoleSlicer) {
		// One view of the events per process, shared by its roles.
		var err error
		if s.events, err = event.NewDirectory(event.DirectoryConfig{Store: cfg.Backends.Shared.Events, Logger: s.log}); err != nil {
			return nil, err
		}
	}
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Redis round trips of the clients this process made (none in embedded
	// mode).
	s.registry.MustRegister(redisx.Collectors()...)
	return s, nil
}

// listen binds role's listener at addr and adds it to s.servers.
func (s *Stack) listen(role, addr string) (*roleServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stack: %s: listen %s: %w", role, addr, err)
	}
	rs := &roleServer{role: role, ln: ln}
	s.servers = append(s.servers, rs)
	return rs, nil
}

// listenAll binds the listener of every role here, and the metrics
// listener when configured, and sets their URLs.
func (s *Stack) listenAll() (map[string]*roleServer, error) {
	cfg := &s.cfg
	roleAddrs := map[string]string{RoleGSLB: cfg.GSLBAddr, RoleIngest: cfg.IngestAddr, RoleEdge: cfg.EdgeAddr, RoleOrigin: cfg.OriginAddr, RoleSlicer: cfg.SlicerAddr}
	byRole := map[string]*roleServer{}
	for _, role := range AllRoles {
		if !cfg.has(role) {
			continue
		}
		rs, err := s.listen(role, roleAddrs[role])
		if err != nil {
			return nil, err
		}
		byRole[role] = rs
		s.URLs[role] = "http://" + rs.ln.Addr().String()
	}
	// The roles' engines serve /metrics only when the process has no
	// listener of its own for them.
	s.roleGatherer = s.registry
	if cfg.MetricsAddr != "" {
		rs, err := s.listen(MetricsListener, cfg.MetricsAddr)
		if err != nil {
			return nil, err
		}
		s.URLs[MetricsListener] = "http://" + rs.ln.Addr().String()
		// Scrapes are GETs: a declared body is refused at once (400
		// body_not_allowed), as on the edge, rather than waited for.
		rs.srv = httpx.NewServer(httpx.NewEngine(httpx.EngineConfig{Role: MetricsListener, Logger: s.log.With("role", MetricsListener), Gatherer: s.registry, NoBody: true}), 10*time.Second)
		s.roleGatherer = nil
	}
	return byRole, nil
}

// publicURLs loads the roles' certificates and sets the URLs clients use:
// the edge's and ingest's (advertised in the load table), the CDN's, and
// the browser origins allowed.
func (s *Stack) publicURLs(byRole map[string]*roleServer) error {
	cfg := &s.cfg
	for _, c := range cfg.tlsFiles() {
		if rs := byRole[c.role]; rs != nil && c.cert != "" {
			if err := s.serveTLS(rs, c.cert, c.key); err != nil {
				return err
			}
		}
	}
	if rs := byRole[RoleEdge]; rs != nil {
		s.URLs[RoleEdge] = "ws://" + rs.ln.Addr().String() + "/v1/ws"
		if rs.tls != nil {
			s.URLs[RoleEdge] = "wss://" + rs.ln.Addr().String() + "/v1/ws"
		}
		s.advertise(rs, cfg.EdgeURL, "ws://")
	}
	if rs := byRole[RoleIngest]; rs != nil {
		if rs.tls != nil {
			s.URLs[RoleIngest] = "https://" + rs.ln.Addr().String()
		}
		s.advertise(rs, cfg.IngestURL, "http://")
	}
	if cfg.PublicCDN == "" {
		if u, ok := s.URLs[RoleOrigin]; ok {
			cfg.PublicCDN = u + "/"
		}
	}
	if cfg.devPublic() && s.URLs[RoleGSLB] != "" {
		// The page is served by the gslb: its origin is the gslb's, under
		// either name a newcomer may type.
		u := s.URLs[RoleGSLB]
		cfg.CORSOrigins = append(cfg.CORSOrigins, u, strings.Replace(u, "127.0.0.1", "localhost", 1))
	}
	var err error
	if s.origins, err = httpx.ParseOrigins(cfg.CORSOrigins); err != nil {
		return fmt.Errorf("stack: CORS origins: %w", err)
	}
	return nil
}

// newKeys makes the auth center (when this process holds the master key)
// and the keyring of the roles that sign or verify tokens.
func (s *Stack) newKeys() error {
	cfg := &s.cfg
	if !cfg.has(RoleGSLB) && !cfg.has(RoleIngest) && !cfg.has(RoleEdge) {
		return nil
	}
	var err error
	// The auth center rides along with whichever process holds the
	// master key; the others only fetch secrets.
	if len(cfg.MasterKey) > 0 {
		if s.center, err = auth.NewCenter(auth.CenterConfig{Store: cfg.Backends.Shared.Secrets, MasterKey: cfg.MasterKey, Logger: s.log}); err != nil {
			return err
		}
	}
	// Only a process holding the master key can sign (the gslb); the
	// others verify with the published public keys.
	s.keyring, err = auth.NewKeyring(auth.KeyringConfig{Store: cfg.Backends.Shared.Secrets, MasterKey: cfg.MasterKey, Logger: s.log})
	return err
}

// newLimits makes the rate limiter of the gslb, ingest and edge, and
// checks the node's line and region names.
func (s *Stack) newLimits() error {
	cfg := &s.cfg
	if cfg.has(RoleGSLB) || cfg.has(RoleIngest) || cfg.has(RoleEdge) {
		var err error
		if s.limiter, err = s.newLimiter(); err != nil {
			return err
		}
	}
	for _, n := range []struct{ what, v string }{{"line", cfg.Line}, {"region", cfg.Region}} {
		if n.v != "" && !lines.ValidName(n.v) {
			return fmt.Errorf("stack: %s %q: want 1-%d characters of a-z, 0-9, '_' and '-', starting with a letter or digit", n.what, n.v, lines.MaxNameLen)
		}
	}
	return nil
}

// engine is a role's gin engine: its logger, metrics, trusted proxies,
// and for the browser-facing gslb and ingest CORS and a health check.
func (s *Stack) engine(role string) *gin.Engine {
	ec := httpx.EngineConfig{Role: role, Logger: s.log.With("role", role), Gatherer: s.roleGatherer, TrustedProxies: s.cfg.TrustedProxies}
	// The origin, like the edge, reads no body: one declared is
	// refused at once rather than waited for until the read timeout.
	ec.NoBody = role == RoleOrigin
	if role == RoleGSLB || role == RoleIngest {
		ec.CORS, ec.CORSRoutes = &s.origins, gslb.BrowserRoutes
		if role == RoleIngest {
			ec.CORSRoutes = ingest.BrowserRoutes
		}
		// Healthy once it can sign or verify a token issued now: a
		// load balancer must not send requests it would refuse.
		if ring := s.keyring; ring != nil {
			ec.Healthy = func() error {
				if !ring.Ready() {
					return auth.ErrNotReady
				}
				return nil
			}
		}
	}
	return httpx.NewEngine(ec)
}

// newGSLB builds the gslb: the allocator over the load table, the entry
// server and the events operator API.
func (s *Stack) newGSLB(rs *roleServer) error {
	if rs == nil {
		return nil
	}
	cfg, b := &s.cfg, &s.cfg.Backends
	if cfg.PublicCDN == "" {
		return errors.New("stack: gslb needs PublicCDN when the origin role is not here")
	}
	ac := gslb.AllocatorConfig{Table: b.Shared.Load, MaxAge: cfg.GSLBMaxTableAge, Logger: s.log}
	if cfg.Lines.MMDB != "" || cfg.Lines.CIDR != "" {
		lc := cfg.Lines
		if lc.Logger == nil {
			lc.Logger = s.log
		}
		var err error
		if s.lines, err = lines.New(lc); err != nil {
			return fmt.Errorf("stack: lines: %w", err)
		}
		ac.Classify = s.lines.Line
	}
	var err error
	if s.allocator, err = gslb.NewAllocator(ac); err != nil {
		return err
	}
	// Clients schedule their polls on the clock that decides segments.
	s.storeTime = clock.NewFollower(cfg.EntryClock, b.Shared.Streams.Now, 0)
	s.registry.MustRegister(clockMargin(s.storeTime))
	keys := [][]byte{cfg.TicketKey}
	if len(cfg.PreviousTicketKey) > 0 {
		keys = append(keys, cfg.PreviousTicketKey)
	}
	tickets, err := auth.NewTicketVerifierFrom(auth.TicketConfig{Keys: keys, MaxLifetime: cfg.TicketMaxLifetime,
		Audience: cfg.TicketAudience, Issuer: cfg.TicketIssuer})
	if err != nil {
		return err
	}
	if s.entry, err = gslb.NewServer(gslb.ServerConfig{
		Allocator: s.allocator, Keyring: s.keyring, Tickets: tickets, CDN: cfg.PublicCDN,
		ServerClock: s.storeTime, Events: s.events, SegmentMs: cfg.SegmentMs, Clock: cfg.EntryClock, Registerer: s.registry, Logger: s.log,
		MaxInFlight: cfg.GSLBMaxInFlight, RateLimit: s.limiter, Bans: b.Shared.Bans,
		MinProtocol: cfg.MinProtocol, SyncMinProtocol: cfg.SyncMinProtocol,
	}); err != nil {
		return err
	}
	e := s.engine(RoleGSLB)
	s.entry.Register(e)
	api := &event.API{Store: b.Shared.Events, Keys: cfg.OperatorKeys, Changed: func(ctx context.Context) { _ = s.events.Refresh(ctx) }, Logger: s.log.With("role", RoleGSLB)}
	api.Register(e.Group("", s.limiter.Handler(nil)))
	if cfg.devPublic() {
		// Dev tickets are minted with the public key alone: an
		// embedder's own key never signs for an unauthenticated GET.
		if string(cfg.TicketKey) == string(auth.DevTicketKey) {
			gslb.RegisterDevTickets(e, cfg.TicketKey)
		}
		sdkweb.Register(e)
		// Without DevVideo (-no-video) no stream is ever stored: every
		// path answers 404 no_video, as without ffmpeg, and the page
		// says why it shows no video.
		hlsdemo.RegisterFunc(e, s.video.Load)
	}
	rs.srv = httpx.NewServer(e, 10*time.Second)
	return nil
}

// newAudit makes the audit recorder the ingest and the slicer share, when
// either is here (needed).
func (s *Stack) newAudit(needed bool) error {
	if !needed {
		return nil
	}
	cfg := &s.cfg
	auditStore := cfg.Backends.Shared.Audit
	if auditStore == nil && cfg.AuditDir != "" {
		var err error
		if auditStore, err = objstore.NewDirStore(cfg.AuditDir); err != nil {
			return fmt.Errorf("stack: audit dir: %w", err)
		}
	}
	if auditStore == nil {
		auditStore = objstore.NewMemoryStore() // tests and embedders; serve refuses this
	}
	node := cfg.NodeID
	if node == "" {
		node = "node"
	}
	var err error
	s.audit, err = audit.New(audit.Config{Store: auditStore, Node: node, Retention: cfg.AuditRetention, Registerer: s.registry, Logger: s.log})
	return err
}

// newIngest builds the ingest and its operator APIs (bans, broadcasts,
// lotteries, takedowns) beside the upload routes.
func (s *Stack) newIngest(rs *roleServer, giftBacklog ingest.GiftBacklog) error {
	if rs == nil {
		return nil
	}
	cfg, b := &s.cfg, &s.cfg.Backends
	policy, err := ingest.ParseWordPolicy(cfg.WordPolicy)
	if err != nil {
		return err
	}
	var words ingest.WordSource
	if cfg.WordsFile != "" {
		words = ingest.FileWords{Path: cfg.WordsFile}
	} else {
		words = ingest.NewStoreWords(b.Shared.Rules)
	}
	if s.ingest, err = ingest.New(ingest.Config{
		Bans: b.Shared.Bans, Global: b.Ingest.Global, Words: words, WordPolicy: policy, ModerationRules: b.Shared.Rules, Audit: s.audit,
		Streams: b.Shared.Streams, Keyring: s.keyring, Addr: s.URLs[RoleIngest], Load: b.Shared.Load,
		Gate: b.Ingest.Gate, Gifts: b.Ingest.Gifts, GiftBacklog: giftBacklog, FastLane: b.Ingest.FastLane, Lotteries: b.Ingest.Lotteries, Reports: b.Ingest.Reports,
		Takedowns: b.Ingest.Takedowns,
		GiftKeys:  cfg.GiftKeys, AnnounceKeys: cfg.AnnounceKeys, Events: s.events, Registerer: s.registry, Logger: s.log,
		MaxInFlight: cfg.IngestCapacity, Line: cfg.Line, Region: cfg.Region, CPU: s.nodeCPU(),
		BroadcastGiftValue: cfg.BroadcastGiftValue, RateLimit: s.limiter,
	}); err != nil {
		return err
	}
	e := s.engine(RoleIngest)
	s.ingest.Register(e)
	// The operator APIs beside the upload routes, behind the same limits.
	ops := e.Group("", s.ingest.RateLimitHandler())
	(&ingest.BanAPI{Store: s.ingest.BanStore(), Keys: cfg.OperatorKeys, Changed: s.refreshBans, Logger: s.log.With("role", RoleIngest)}).Register(ops)
	(&ingest.BroadcastAPI{Streams: b.Shared.Streams, Keys: cfg.OperatorKeys, Registerer: s.registry}).Register(ops)
	(&rules.API{Store: b.Shared.Rules, Kinds: map[string]rules.Check{rules.KindWords: ingest.CheckWordList, rules.KindLimits: rules.CheckLimits, rules.KindModeration: ingest.CheckModeration},
		Keys: cfg.OperatorKeys, Changed: s.refreshRules, Logger: s.log.With("role", RoleIngest)}).Register(ops)
	lotteries := s.ingest.Lotteries()
	(&ingest.LotteryAPI{Store: b.Ingest.Lotteries, Keys: cfg.OperatorKeys, Hosts: s.keyring, Addr: s.URLs[RoleIngest], Logger: s.log.With("role", RoleIngest), Changed: func(ctx context.Context) {
		if lotteries != nil {
			_ = lotteries.Refresh(ctx)
		}
	}}).Register(ops)
	(&ingest.ReportAPI{Store: s.ingest.ReportStore(), Bans: s.ingest.BanStore(), Takedown: s.ingest.ReviewTakedown(), Keys: cfg.OperatorKeys,
		Hosts: s.keyring, Addr: s.URLs[RoleIngest], Events: s.events, Audit: s.audit, BansChanged: s.refreshBans, Logger: s.log.With("role", RoleIngest)}).Register(ops)
	(&ingest.TakedownAPI{Server: s.ingest, Keys: cfg.OperatorKeys, Hosts: s.keyring, Addr: s.URLs[RoleIngest], Logger: s.log.With("role", RoleIngest)}).Register(ops)
	rs.srv = httpx.NewServer(e, 10*time.Second)
	return nil
}

// newEdge builds the edge.
func (s *Stack) newEdge(rs *roleServer) error {
	if rs == nil {
		return nil
	}
	cfg, b := &s.cfg, &s.cfg.Backends
	var err error
	if s.edge, err = edge.New(edge.Config{
		Store: b.Shared.Streams, Verifier: s.keyring, Addr: s.URLs[RoleEdge], LoadTable: b.Shared.Load,
		MaxConns: cfg.EdgeCapacity, Line: cfg.Line, Region: cfg.Region, CPU: s.nodeCPU(),
		ConnectRate: cfg.EdgeConnectRate, MaxConnsPerUser: cfg.EdgeMaxUserConns, MaxRoomConns: cfg.EdgeMaxRoomConns,
		MinProtocol:   cfg.MinProtocol,
		MaxHelloWaits: cfg.EdgeMaxHelloWaits, MaxHelloWaitsPerAddr: cfg.EdgeMaxAddrHelloWaits, ReportEvery: cfg.EdgeReportEvery,
		MinGiftValue: cfg.MinGiftValue, DrainPeriod: cfg.EdgeDrain, AllowOrigins: s.origins, Events: s.events, Registerer: s.registry, Logger: s.log,
		RateLimit: s.limiter, TrustedProxies: cfg.TrustedProxies, NoMetricsRoute: s.roleGatherer == nil,
		Bans: b.Shared.Bans,
	}); err != nil {
		return err
	}
	// WebSockets live long: no write timeout on the server; the edge
	// sets per-write deadlines itself. The read timeout stays: it
	// bounds the handshake request, and the upgrade clears it from the
	// socket it takes over.
	rs.srv = httpx.NewServer(s.edge.Handler(), 0)
	return nil
}

// newSlicer builds the slicer and its admin API.
func (s *Stack) newSlicer(rs *roleServer) error {
	if rs == nil {
		return nil
	}
	cfg, b := &s.cfg, &s.cfg.Backends
	var err error
	if s.slicer, err = slicer.New(slicer.Config{
		Streams: b.Shared.Streams, Objects: b.Shared.Objects, Lease: b.Slicer.Lease, Settings: b.Slicer.Settings, Backlog: b.Slicer.Backlog,
		Events: s.events, SegmentMs: cfg.SegmentMs, Retention: cfg.Retention,
		NodeID: cfg.NodeID, Budget: cfg.Budget, Audit: s.audit, Registerer: s.registry, Logger: s.log,
	}); err != nil {
		return err
	}
	e := s.engine(RoleSlicer)
	s.slicer.RegisterAdmin(e, cfg.OperatorKeys)
	rs.srv = httpx.NewServer(e, 10*time.Second)
	return nil
}

// newOrigin builds the origin: the object store over HTTP, for the CDN.
func (s *Stack) newOrigin(rs *roleServer) error {
	if rs == nil {
		return nil
	}
	e := s.engine(RoleOrigin)
	origin.Register(e, s.cfg.Backends.Shared.Objects)
	rs.srv = httpx.NewServer(e, 30*time.Second)
	return nil
}

// serverTimeouts applies Config.ReadTimeout to every listener, and quiets
// the TLS handshake errors of those that terminate TLS.
func (s *Stack) serverTimeouts() {
	for _, rs := range s.servers {
		if s.cfg.ReadTimeout > 0 {
			rs.srv.ReadTimeout = s.cfg.ReadTimeout
			rs.srv.ReadHeaderTimeout = min(rs.srv.ReadHeaderTimeout, s.cfg.ReadTimeout)
		}
		if rs.tls != nil {
			rs.srv.ErrorLog = handshakeQuiet(s.log.With("role", rs.role))
		}
	}
}
