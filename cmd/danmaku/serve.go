package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"strings"

	"context"
	linesclass "danmaku/gslb/lines"
	"danmaku/internal/objstore"
	"danmaku/internal/ratelimit"
	"danmaku/internal/redisx"
	"fmt"
	"io"
	"os"
	"time"

	"danmaku/internal/stack"
	"danmaku/sdk/wire"
)

type serveFlags struct {
	gslb, ingest, edge, origin, slicer string
	metricsAddr                        string
	cdn, data                          string
	ingestURL, edgeURL, nodeID         string
	budget                             int
	segmentMs                          int64
	retention                          time.Duration
	minGift                            int64
	broadcastGift                      int64
	logLevel                           string
	logJSON                            bool
	corsOrigins                        string
	dev                                bool // `danmaku dev`: dev keys, the demo page
	// devUnsafe is dev's -dev-unsafe-backends: real backends or production
	// keys, and then nothing public (checkDevSafe).
	devUnsafe bool
	noVideo   bool

	redisURL, redisUser string
	redisCluster        bool
	giftWaitReplicas    int
	s3                  objstore.S3Config
	auditDir            string
	auditBucket         string
	auditPrefix         string
	rulesBucket         string
	rulesPrefix         string
	rulesDir            string
	auditRetention      time.Duration
	words, wordPolicy   string
	ingestCap           int
	maxConns            int
	edgeDrain           time.Duration
	readTimeout         time.Duration
	edgeConnectRate     float64
	edgeUserConns       int
	edgeHelloWaits      int
	edgeAddrHelloWaits  int
	edgeRoomConns       int
	edgeTLSCert         string
	edgeTLSKey          string
	ingestTLSCert       string
	ingestTLSKey        string
	line                string
	region              string
	lines               linesclass.Config
	linesISP, linesReg  string
	gslbInFlight        int
	minProtocol         int
	syncMinProtocol     int
	ticketMaxLifetime   time.Duration
	ticketAudience      string
	ticketIssuer        string
	gslbTableAge        time.Duration
	trustedProxies      string
	rateLimits          string
	gslbNodes           int

	settings settings // the strict ones; their environment's errors wait for stackConfig
}

// env returns the environment variable name, or def when it is unset.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// register adds the roles' flags. Every number, duration, boolean, list
// and enumeration is a strict setting (settings.go), read from its flag or
// its environment variable by one rule; plain strings (addresses, paths,
// names) are checked where they are used.
func (f *serveFlags) register(fs *flag.FlagSet) {
	ss := &f.settings
	ss.fs = fs
	fs.StringVar(&f.gslb, "gslb", stack.DefaultGSLBAddr, "gslb listen address")
	fs.StringVar(&f.ingest, "ingest", stack.DefaultIngestAddr, "ingest listen address")
	fs.StringVar(&f.edge, "edge", stack.DefaultEdgeAddr, "edge listen address")
	fs.StringVar(&f.origin, "origin", stack.DefaultOriginAddr, "segment origin listen address")
	fs.StringVar(&f.slicer, "slicer", stack.DefaultSlicerAddr, "slicer metrics/health listen address")
	textVar(ss, &f.metricsAddr, "metrics-addr", "DANMAKU_METRICS_ADDR", "a host:port listen address", checkListenAddr, "7711", "listen address of this process's /metrics (and /healthz), plain HTTP: then no role serves /metrics on its own port (404 not_found there). Required outside dev by the edge and the ingest, whose ports are public")
	fs.StringVar(&f.cdn, "cdn", "", "CDN base URL handed to clients (default: this process's origin)")
	fs.StringVar(&f.data, "data", "", "directory to keep segments in (default: memory)")
	countVar(ss, &f.budget, "budget", "", between(0, 100_000), "messages per second per room (default 60)")
	f.segmentMs = 1000 // what the zero means to the stack, written out for -h
	countVar(ss, &f.segmentMs, "segment-ms", "", oneOfCounts(1000, 500, 250), "segment duration of rooms without their own setting: 1000, 500 or 250")
	durationVar(ss, &f.retention, "room-retention", "", 0, "how long an ended room's streams are kept, for moderation (default 1h)")
	countVar(ss, &f.minGift, "min-gift-value", "", atLeast(0), "lowest gift value the edge pushes (default: all)")
	countVar(ss, &f.broadcastGift, "broadcast-gift-value", "", atLeast(0), "ingest: total gift value (value × count) from which a gift is also announced site-wide, in every live room (default: never)")
	enumVar(ss, &f.logLevel, "log-level", "", "info", []string{"debug", "info", "warn", "error"}, "debug, info, warn or error")
	boolVar(ss, &f.logJSON, "log-json", "", "log JSON lines instead of text")
	fs.StringVar(&f.ingestURL, "ingest-url", env("DANMAKU_INGEST_URL", ""), "public URL of this ingest (default: http://<ingest listen address>) [DANMAKU_INGEST_URL]")
	fs.StringVar(&f.edgeURL, "edge-url", env("DANMAKU_EDGE_URL", ""), "public URL of this edge (default: ws://<edge listen address>/v1/ws) [DANMAKU_EDGE_URL]")
	fs.StringVar(&f.nodeID, "node-id", env("DANMAKU_NODE_ID", ""), "node id for leases and load reports (default: hostname-pid) [DANMAKU_NODE_ID]")
	textVar(ss, &f.corsOrigins, "cors-origins", "DANMAKU_CORS_ORIGINS", "a comma list of web origins (scheme://host[:port]) or *", checkOrigins, "example.com", "comma-separated web origins whose pages may call the gslb and ingest and connect to the edge, or * (dev adds its demo page's)")
	fs.StringVar(&f.redisURL, "redis", env("DANMAKU_REDIS", ""), "Redis URL or host:port; enables the Redis backends [DANMAKU_REDIS]")
	boolVar(ss, &f.redisCluster, "redis-cluster", "DANMAKU_REDIS_CLUSTER", "-redis is one seed (or a rediss:// configuration endpoint) of a Redis Cluster; a comma list of addresses always is")
	countVar(ss, &f.giftWaitReplicas, "gift-wait-replicas", "DANMAKU_GIFT_WAIT_REPLICAS", between(0, 5), "answer a gift only once this many Redis replicas hold it, so it survives its master's loss (0: the master's acknowledgement)")
	fs.StringVar(&f.redisUser, "redis-user", env("DANMAKU_REDIS_USER", ""), "Redis ACL user (password from DANMAKU_REDIS_PASSWORD) [DANMAKU_REDIS_USER]")
	fs.StringVar(&f.s3.Bucket, "s3-bucket", env("DANMAKU_S3_BUCKET", ""), "S3 bucket; enables the S3 object store [DANMAKU_S3_BUCKET]")
	fs.StringVar(&f.s3.Endpoint, "s3-endpoint", env("DANMAKU_S3_ENDPOINT", ""), "S3-compatible endpoint URL (default: AWS) [DANMAKU_S3_ENDPOINT]")
	fs.StringVar(&f.s3.Region, "s3-region", env("DANMAKU_S3_REGION", ""), "S3 region (default us-east-1) [DANMAKU_S3_REGION]")
	fs.StringVar(&f.s3.Prefix, "s3-prefix", env("DANMAKU_S3_PREFIX", ""), "key prefix inside the bucket, ending in / [DANMAKU_S3_PREFIX]")
	fs.StringVar(&f.auditDir, "audit-dir", env("DANMAKU_AUDIT_DIR", ""), "directory of the audit trail when -audit-s3-bucket is not set, on a disk (never tmpfs); ingest and slicer need one of them outside dev (dev's default: danmaku/audit in the user's cache directory) [DANMAKU_AUDIT_DIR]")
	fs.StringVar(&f.auditBucket, "audit-s3-bucket", env("DANMAKU_AUDIT_S3_BUCKET", ""), "S3 bucket of the audit trail (never the segments bucket; same endpoint and credentials) [DANMAKU_AUDIT_S3_BUCKET]")
	fs.StringVar(&f.rulesBucket, "rules-s3-bucket", env("DANMAKU_RULES_S3_BUCKET", ""), "S3 bucket keeping the fleet's rules (words, limits, moderation) as versioned objects instead of Redis (never the segments bucket; same endpoint and credentials) [DANMAKU_RULES_S3_BUCKET]")
	fs.StringVar(&f.rulesPrefix, "rules-s3-prefix", env("DANMAKU_RULES_S3_PREFIX", ""), "key prefix inside the rules bucket, ending in / [DANMAKU_RULES_S3_PREFIX]")
	fs.StringVar(&f.rulesDir, "rules-dir", env("DANMAKU_RULES_DIR", ""), "directory keeping the fleet's rules as versioned files instead of Redis, when -rules-s3-bucket is not set (one machine, or a shared file system) [DANMAKU_RULES_DIR]")
	fs.StringVar(&f.auditPrefix, "audit-s3-prefix", env("DANMAKU_AUDIT_S3_PREFIX", ""), "key prefix inside the audit bucket, ending in / [DANMAKU_AUDIT_S3_PREFIX]")
	durationVar(ss, &f.auditRetention, "audit-retention", "DANMAKU_AUDIT_RETENTION", time.Hour, "how long audit objects are kept before the ingest deletes them (default 720h: 30 days)")
	removedVar(ss, "edge-capacity", "DANMAKU_EDGE_CAPACITY", "the edge's one capacity setting is -max-conns (DANMAKU_MAX_CONNS)")
	countVar(ss, &f.maxConns, "max-conns", "DANMAKU_MAX_CONNS", atLeast(0), "edge: WebSocket connections this edge holds at most (beyond, 503 over_capacity), reported to the gslb as its capacity (0: unlimited)")
	durationVar(ss, &f.edgeDrain, "edge-drain", "DANMAKU_EDGE_DRAIN", 0, "edge: how long a stopping edge spreads closing its connections over, so that its clients do not all come back at once (default 10s; dev 1s)")
	durationVar(ss, &f.readTimeout, "read-timeout", "DANMAKU_READ_TIMEOUT", 0, "every role: how long a request's header and body may take to arrive before its connection is closed (default 15s)")
	numberVar(ss, &f.edgeConnectRate, "edge-connect-rate", "DANMAKU_EDGE_CONNECT_RATE", "edge: new connections a second the edge takes; beyond, 503 connect_rate with a jittered Retry-After (default 5000; negative: unlimited)")
	countVar(ss, &f.edgeUserConns, "edge-max-user-conns", "DANMAKU_EDGE_MAX_USER_CONNS", anyCount(), "edge: connections one user may hold on this edge; beyond, 429 too_many_conns (default 8; negative: unlimited)")
	countVar(ss, &f.edgeHelloWaits, "edge-max-hello-waits", "DANMAKU_EDGE_MAX_HELLO_WAITS", anyCount(), "edge: sockets upgraded without a token that may wait for their first frame (the browser's hello) at once; beyond, 503 hello_waits with a jittered Retry-After (default 10000; negative: unlimited)")
	countVar(ss, &f.edgeAddrHelloWaits, "edge-max-addr-hello-waits", "DANMAKU_EDGE_MAX_ADDR_HELLO_WAITS", anyCount(), "edge: such sockets one client address may hold; beyond, 429 hello_waits_addr (default 256; negative: unlimited)")
	countVar(ss, &f.edgeRoomConns, "edge-max-room-conns", "DANMAKU_EDGE_MAX_ROOM_CONNS", atLeast(0), "edge: connections one room may hold on this edge; beyond, 503 room_full and the client tries its next edge (0: unlimited)")
	fs.StringVar(&f.edgeTLSCert, "edge-tls-cert", env("DANMAKU_EDGE_TLS_CERT", ""), "edge: PEM certificate chain; with -edge-tls-key the edge serves wss:// itself, re-reading both files when they change (empty: plain ws://, e.g. behind a TLS-terminating balancer) [DANMAKU_EDGE_TLS_CERT]")
	fs.StringVar(&f.edgeTLSKey, "edge-tls-key", env("DANMAKU_EDGE_TLS_KEY", ""), "edge: PEM private key of -edge-tls-cert [DANMAKU_EDGE_TLS_KEY]")
	fs.StringVar(&f.ingestTLSCert, "ingest-tls-cert", env("DANMAKU_INGEST_TLS_CERT", ""), "ingest: PEM certificate chain; with -ingest-tls-key the ingest serves https:// itself, re-reading both files when they change (empty: plain http://) [DANMAKU_INGEST_TLS_CERT]")
	fs.StringVar(&f.ingestTLSKey, "ingest-tls-key", env("DANMAKU_INGEST_TLS_KEY", ""), "ingest: PEM private key of -ingest-tls-cert [DANMAKU_INGEST_TLS_KEY]")
	countVar(ss, &f.ingestCap, "ingest-capacity", "DANMAKU_INGEST_CAPACITY", atLeast(0), "ingest: in-flight requests this ingest is sized for, reported to the gslb as its capacity (0: unlimited)")
	fs.StringVar(&f.line, "line", env("DANMAKU_LINE", ""), "ISP line this node's edge and ingest addresses serve, as the gslb's classifier names lines (empty: BGP, every line) [DANMAKU_LINE]")
	fs.StringVar(&f.region, "region", env("DANMAKU_REGION", ""), "region this node stands in, reported to the gslb, as its classifier names regions (empty: unknown) [DANMAKU_REGION]")
	fs.StringVar(&f.lines.MMDB, "lines-mmdb", env("DANMAKU_LINES_MMDB", ""), "gslb: MaxMind-format database classifying client IPs into lines and regions, re-read when it changes (replace by write-then-rename) [DANMAKU_LINES_MMDB]")
	fs.StringVar(&f.lines.CIDR, "lines-cidr", env("DANMAKU_LINES_CIDR", ""), "gslb: operator file of 'PREFIX LINE [REGION]' lines, winning over -lines-mmdb, re-read when it changes [DANMAKU_LINES_CIDR]")
	textVar(ss, &f.linesISP, "lines-isp", "DANMAKU_LINES_ISP", "a comma list of key=line", checkMapping, "as4134", "gslb: ASN or ISP name to line for a standard ISP/ASN database, e.g. 'as4134=telecom,as4837=unicom'")
	textVar(ss, &f.linesReg, "lines-regions", "DANMAKU_LINES_REGIONS", "a comma list of code=region", checkMapping, "cn-sh", "gslb: country or country-subdivision code to region, e.g. 'cn-sh=cn-east'")
	countVar(ss, &f.minProtocol, "min-protocol", "DANMAKU_MIN_PROTOCOL", between(0, wire.Protocol), "gslb and edge: the oldest client protocol served (clients that send none are 1); older ones get 426 protocol_unsupported naming it (default 1: every client)")
	countVar(ss, &f.syncMinProtocol, "sync-min-protocol", "DANMAKU_SYNC_MIN_PROTOCOL", between(0, wire.MaxProtocol), "gslb: the oldest client protocol told it may hold messages to its video's playhead; others run in wall-clock mode. Raise it during a show to steer an SDK release back to wall-clock mode; above the newest protocol it turns sync off (default 2)")
	countVar(ss, &f.gslbInFlight, "gslb-max-inflight", "DANMAKU_GSLB_MAX_INFLIGHT", atLeast(0), "gslb: entry requests answered at once; beyond, 503 overloaded at once with a jittered Retry-After (default 128, about 64 per core)")
	durationVar(ss, &f.ticketMaxLifetime, "ticket-max-lifetime", "DANMAKU_TICKET_MAX_LIFETIME", time.Minute, "gslb: longest a business ticket may live (exp after iat, or after now); longer ones get 401 ticket_lifetime (default 24h)")
	textVar(ss, &f.ticketAudience, "ticket-audience", "DANMAKU_TICKET_AUDIENCE", "1-256 printable ASCII characters without spaces", checkClaimValue, "a b", "gslb: a ticket's aud must name this (empty: aud not checked)")
	textVar(ss, &f.ticketIssuer, "ticket-issuer", "DANMAKU_TICKET_ISSUER", "1-256 printable ASCII characters without spaces", checkClaimValue, "a b", "gslb: a ticket's iss must be this (empty: iss not checked)")
	durationVar(ss, &f.gslbTableAge, "gslb-max-table-age", "DANMAKU_GSLB_MAX_TABLE_AGE", 0, "gslb: how long the last good load table is used while syncs fail; then 503 table_stale (default 3s)")
	textVar(ss, &f.trustedProxies, "trusted-proxies", "DANMAKU_TRUSTED_PROXIES", "a comma list of addresses or CIDRs", checkProxies, "10.0.0.0/8,not-an-ip", "comma list of addresses or CIDRs of the load balancers whose X-Forwarded-For is believed (the gslb classifies clients by address); empty: none")
	fs.StringVar(&f.rateLimits, "rate-limits", env("DANMAKU_RATE_LIMITS", ""), "gslb, ingest: rate-limit rules (JSON, docs/api-limits.md), re-read every 250 ms; with -redis the rules may instead be changed in Redis (default: the built-in rules) [DANMAKU_RATE_LIMITS]")
	countVar(ss, &f.gslbNodes, "gslb-nodes", "DANMAKU_GSLB_NODES", atLeast(0), "gslb: how many gslb processes share the gslb's shared-window rate limits; each admits its share while Redis is unreachable (default 1)")
	fs.StringVar(&f.words, "words", env("DANMAKU_WORDS_FILE", ""), "sensitive-word list, one word a line, re-read when it changes [DANMAKU_WORDS_FILE]")
	enumVar(ss, &f.wordPolicy, "word-policy", "DANMAKU_WORD_POLICY", "mask", []string{"mask", "reject", "refuse", "off"}, "what a listed word does unless the room's event says: mask, reject (dropped silently), refuse (422) or off; only until a moderation document is pushed (danmaku moderation push), whose word_policy then holds")
	boolVar(ss, &f.s3.PathStyle, "s3-path-style", "DANMAKU_S3_PATH_STYLE", "path-style S3 addressing (most S3-compatible servers)")
}

// secrets are read from the environment only, never flags (a flag shows in
// the process list).
func (f *serveFlags) stackConfig(roles []string) (stack.Config, stack.BackendConfig, error) {
	// What the environment held that did not parse stops the role here,
	// once: a flag's own bad value has stopped it at parsing already.
	if err := f.settings.err(); err != nil {
		return stack.Config{}, stack.BackendConfig{}, err
	}
	cfg := stack.Config{
		Roles:    roles,
		GSLBAddr: f.gslb, IngestAddr: f.ingest, EdgeAddr: f.edge, OriginAddr: f.origin, SlicerAddr: f.slicer,
		PublicCDN: f.cdn, DataDir: f.data, Budget: f.budget, SegmentMs: f.segmentMs, Retention: f.retention, MinGiftValue: f.minGift, BroadcastGiftValue: f.broadcastGift,
		IngestURL: f.ingestURL, EdgeURL: f.edgeURL, NodeID: f.nodeID,
		Dev: f.dev, DevUnsafeBackends: f.devUnsafe, DevVideo: f.dev && !f.noVideo,
		EdgeCapacity: f.maxConns, IngestCapacity: f.ingestCap, Line: f.line, Region: f.region, Lines: f.lines,
		GSLBMaxInFlight: f.gslbInFlight, GSLBMaxTableAge: f.gslbTableAge,
		MinProtocol: f.minProtocol, SyncMinProtocol: f.syncMinProtocol,
		TicketMaxLifetime: f.ticketMaxLifetime, TicketAudience: f.ticketAudience, TicketIssuer: f.ticketIssuer,
		AuditDir: f.auditDir, AuditRetention: f.auditRetention, WordsFile: f.words, WordPolicy: f.wordPolicy,
		RateLimitsFile: f.rateLimits, GSLBNodes: f.gslbNodes,
	}
	if err := f.checkAudit(roles); err != nil {
		return cfg, stack.BackendConfig{}, err
	}
	if err := f.checkMetrics(roles); err != nil {
		return cfg, stack.BackendConfig{}, err
	}
	cfg.MetricsAddr = f.metricsAddr
	// The settings' rules have checked the lists: these conversions cannot
	// fail.
	cfg.Lines.ISPLines, _ = parseMapping(f.linesISP)
	cfg.Lines.Regions, _ = parseMapping(f.linesReg)
	cfg.TrustedProxies = splitList(f.trustedProxies)
	cfg.CORSOrigins = splitList(f.corsOrigins)
	cfg.ReadTimeout = f.readTimeout
	cfg.EdgeDrain, cfg.EdgeConnectRate, cfg.EdgeMaxUserConns, cfg.EdgeMaxRoomConns = f.edgeDrain, f.edgeConnectRate, f.edgeUserConns, f.edgeRoomConns
	cfg.EdgeMaxHelloWaits, cfg.EdgeMaxAddrHelloWaits = f.edgeHelloWaits, f.edgeAddrHelloWaits
	// File paths, not secrets: the key itself stays in its file.
	for _, p := range []struct{ role, cert, key, secure, plain string }{
		{"edge", f.edgeTLSCert, f.edgeTLSKey, "wss://", "ws://"},
		{"ingest", f.ingestTLSCert, f.ingestTLSKey, "https://", "http://"},
	} {
		if (p.cert == "") != (p.key == "") {
			return cfg, stack.BackendConfig{}, usageError{fmt.Errorf("-%[1]s-tls-cert and -%[1]s-tls-key go together: give both (the %[1]s serves %[2]s) or neither (plain %[3]s)", p.role, p.secure, p.plain)}
		}
	}
	cfg.EdgeTLSCert, cfg.EdgeTLSKey = f.edgeTLSCert, f.edgeTLSKey
	cfg.IngestTLSCert, cfg.IngestTLSKey = f.ingestTLSCert, f.ingestTLSKey
	if v := os.Getenv("DANMAKU_MASTER_KEY"); v != "" {
		k, err := hex.DecodeString(v)
		if err != nil || len(k) < 32 {
			return cfg, stack.BackendConfig{}, usageError{errors.New("DANMAKU_MASTER_KEY must be at least 32 bytes in hex")}
		}
		cfg.MasterKey = k
	}
	if v := os.Getenv("DANMAKU_TICKET_KEY"); v != "" {
		cfg.TicketKey = []byte(v)
	}
	if v := os.Getenv("DANMAKU_TICKET_KEY_PREVIOUS"); v != "" {
		cfg.PreviousTicketKey = []byte(v)
	}
	if os.Getenv("DANMAKU_SERVICE_KEYS") != "" {
		return cfg, stack.BackendConfig{}, usageError{errors.New("DANMAKU_SERVICE_KEYS was split by scope: DANMAKU_GIFT_KEYS, DANMAKU_ANNOUNCE_KEYS, DANMAKU_OPERATOR_KEYS")}
	}
	for _, k := range []struct {
		env  string
		keys *[]string
	}{
		{"DANMAKU_GIFT_KEYS", &cfg.GiftKeys},
		{"DANMAKU_ANNOUNCE_KEYS", &cfg.AnnounceKeys},
		{"DANMAKU_OPERATOR_KEYS", &cfg.OperatorKeys},
	} {
		if v := os.Getenv(k.env); v != "" {
			*k.keys = strings.Split(v, ",")
		}
	}
	f.s3.AccessKey = os.Getenv("DANMAKU_S3_ACCESS_KEY")
	f.s3.SecretKey = os.Getenv("DANMAKU_S3_SECRET_KEY")
	b := stack.BackendConfig{
		Redis:            redisx.Config{URL: f.redisURL, Username: f.redisUser, Password: os.Getenv("DANMAKU_REDIS_PASSWORD"), Cluster: f.redisCluster},
		GiftWaitReplicas: f.giftWaitReplicas,
		S3:               f.s3,
	}
	if f.auditBucket != "" {
		b.AuditS3 = f.s3
		b.AuditS3.Bucket, b.AuditS3.Prefix = f.auditBucket, f.auditPrefix
	}
	if f.rulesBucket != "" {
		b.RulesS3 = f.s3
		b.RulesS3.Bucket, b.RulesS3.Prefix = f.rulesBucket, f.rulesPrefix
	}
	b.RulesDir = f.rulesDir
	return cfg, b, nil
}

// checkMetrics holds the public roles to a metrics port of their own
// outside dev. The edge's and the ingest's listeners face the internet (the
// gslb hands clients their addresses), so a /metrics there would show every
// viewer the node's counters, and no security group can close one path of
// a port: with -metrics-addr the scrapers get a port that only they reach.
// dev runs on loopback and keeps /metrics on every role's port.
func (f *serveFlags) checkMetrics(roles []string) error {
	if f.dev || f.metricsAddr != "" {
		return nil
	}
	var public []string
	for _, r := range roles {
		if r == stack.RoleIngest || r == stack.RoleEdge {
			public = append(public, r)
		}
	}
	if len(public) == 0 {
		return nil
	}
	return usageError{fmt.Errorf("%s serves clients on a public port and never /metrics there: give -metrics-addr [DANMAKU_METRICS_ADDR], a host:port only the scrapers reach (only dev serves /metrics on the role's port)", strings.Join(public, " and "))}
}

func serveRoles(ctx context.Context, roles []string, f *serveFlags, stdout, stderr io.Writer) error {
	log, err := newLogger(stderr, f.logLevel, f.logJSON)
	if err != nil {
		return err
	}
	cfg, bcfg, err := f.stackConfig(roles)
	if err != nil {
		return err
	}
	cfg.Logger = log
	backends, closeBackends, err := stack.OpenBackends(ctx, bcfg, log)
	if err != nil {
		return err
	}
	defer closeBackends()
	cfg.Backends = backends
	if bcfg.Redis.URL != "" {
		// The rate limits' windows live in the same Redis as the other
		// backends, on a client of their own; their rules, as the word
		// list, are the versioned documents of Backends.Shared.Rules (`danmaku
		// limits push`).
		rdb, err := redisx.Connect(ctx, bcfg.Redis)
		if err != nil {
			return fmt.Errorf("rate limits: %w", err)
		}
		defer rdb.Close()
		cfg.Backends.Limits.Window = ratelimit.NewRedisWindow(rdb)
	}
	st, err := stack.New(cfg)
	if err != nil {
		return err
	}
	for _, role := range append(stack.AllRoles[:len(stack.AllRoles):len(stack.AllRoles)], stack.MetricsListener) {
		if u, ok := st.URLs[role]; ok {
			fmt.Fprintf(stdout, "%-7s listening on %s\n", role, u)
		}
	}
	if _, ok := st.URLs[stack.RoleGSLB]; ok {
		fmt.Fprintf(stdout, "entry:  %s/v1/entry?room=demo (ticket: danmaku ticket -user alice)\n", st.URLs[stack.RoleGSLB])
		if f.dev && !f.devUnsafe {
			fmt.Fprintf(stdout, "demo:   open %s/ in a browser\n", st.URLs[stack.RoleGSLB])
		}
	}
	fmt.Fprintln(stdout, "press Ctrl-C to stop")
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync()
	}
	err = st.Run(ctx)
	fmt.Fprintln(stdout, "stopped")
	return err
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", stderr)
	var f serveFlags
	f.registerDev(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	f.setDev()
	if err := f.checkDevSafe(); err != nil {
		return err
	}
	return serveRoles(ctx, stack.AllRoles, &f, stdout, stderr)
}

// registerDev adds dev's flags: the roles' and the one naming the risk of
// running dev on real backends.
func (f *serveFlags) registerDev(fs *flag.FlagSet) {
	f.register(fs)
	boolVar(&f.settings, &f.noVideo, "no-video", "", "serve no demo video: by default dev runs ffmpeg (when installed) for a live HLS test stream with program date times at the gslb's /hls/live.m3u8, which the demo page plays under the barrage")
	boolVar(&f.settings, &f.devUnsafe, "dev-unsafe-backends", "", "run dev on real backends (-redis, -s3-bucket, -audit-s3-bucket, -rules-s3-bucket, -rules-dir) or with production keys (DANMAKU_TICKET_KEY, DANMAKU_MASTER_KEY, DANMAKU_*_KEYS) from the environment: then every key is required as for the roles, and no public dev key, dev ticket (GET /v1/dev/ticket) or demo page is served")
}

// devProductionKeys are the secrets dev refuses from its environment: it
// would sign with them (tickets for anyone who asks, tokens) or take them
// beside its public keys.
var devProductionKeys = []string{"DANMAKU_TICKET_KEY", "DANMAKU_MASTER_KEY", "DANMAKU_GIFT_KEYS", "DANMAKU_ANNOUNCE_KEYS", "DANMAKU_OPERATOR_KEYS"}

// checkDevSafe keeps dev's public keys on its in-memory backends: with a
// production key in the environment or a real backend, dev refuses to
// start, naming each, unless -dev-unsafe-backends says the risk is known
// (then the stack serves nothing public). Once dev's unauthenticated
// GET /v1/dev/ticket minted admin tickets under a production
// DANMAKU_TICKET_KEY, and its public service key was taken while it wrote
// to real Redis and S3.
func (f *serveFlags) checkDevSafe() error {
	if f.devUnsafe {
		return nil
	}
	var risks []string
	for _, k := range devProductionKeys {
		if os.Getenv(k) != "" {
			risks = append(risks, k+" is set (a production key)")
		}
	}
	for _, b := range []struct{ flag, env, v string }{
		{"redis", "DANMAKU_REDIS", f.redisURL},
		{"s3-bucket", "DANMAKU_S3_BUCKET", f.s3.Bucket},
		{"audit-s3-bucket", "DANMAKU_AUDIT_S3_BUCKET", f.auditBucket},
		{"rules-s3-bucket", "DANMAKU_RULES_S3_BUCKET", f.rulesBucket},
		// A directory a fleet follows: dev's public operator key would push to it.
		{"rules-dir", "DANMAKU_RULES_DIR", f.rulesDir},
	} {
		if b.v != "" {
			risks = append(risks, fmt.Sprintf("-%s [%s] names a real backend", b.flag, b.env))
		}
	}
	if len(risks) == 0 {
		return nil
	}
	return usageError{fmt.Errorf("danmaku dev runs on in-memory backends with public keys and mints tickets for anyone who asks; refused: %s. Unset them, or give -dev-unsafe-backends to run every role in one process with your own keys and nothing public", strings.Join(risks, "; "))}
}

// setDev makes the flags dev's: its own defaults, where the roles have none.
func (f *serveFlags) setDev() {
	f.dev = true
	if f.auditDir == "" && f.auditBucket == "" {
		f.auditDir = DefaultAuditDir() // dev's alone: roles are given theirs (checkAudit)
	}
}

// roleCmd runs one role. Roles of different processes share state only
// through the Redis and S3 backends (-redis, -s3-bucket); without them a role
// runs on in-memory backends of its own.
func roleCmd(role string) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(role, stderr)
		var f serveFlags
		f.register(fs)
		if err := parse(fs, args); err != nil {
			return err
		}
		roles := []string{role}
		if role == stack.RoleGSLB && f.cdn == "" {
			f.cdn = "http://" + f.origin + "/"
		}
		return serveRoles(ctx, roles, &f, stdout, stderr)
	}
}
