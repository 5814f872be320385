package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"danmaku/internal/loadgen"
	"danmaku/internal/loadgen/htmlreport"
	"danmaku/internal/stack"
)

// rateFlag is a rate flag ("1000/s", "600/m", "2.5k"); 0 turns the part
// off, which loadgen.Config spells negative.
type rateFlag struct{ v float64 }

func (r *rateFlag) String() string { return loadgen.FormatRate(r.v) }
func (r *rateFlag) Set(s string) error {
	v, err := loadgen.ParseRate(s)
	if err != nil {
		return err
	}
	r.v = v
	return nil
}

// off maps a flag's 0 ("none") to the Config's negative.
func off(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}

// loadgenOpts are the flags that are not the generator's Config.
type loadgenOpts struct {
	jsonPath string
	// htmlPath: also write the report as one HTML page (htmlreport),
	// judged against the service levels of sloPath (default:
	// htmlreport.DefaultSLO).
	htmlPath, sloPath string
	quiet             bool
	logLevel          string
	// procs > 1 runs the load in that many child processes (-shard i/procs
	// each) and merges their reports; childArgs are the flags they get.
	procs     int
	childArgs []string
	// merge: the arguments are report files to merge, nothing is run.
	merge      bool
	mergeFiles []string
	// entryPulse: a pulse at the entry endpoint (loadgen.RunEntryPulse)
	// instead of an audience; pulseSources and pulseWorkers shape it.
	entryPulse   bool
	pulseSources string
	pulseWorkers int
	// slo is the content of sloPath, nil without one.
	slo *htmlreport.SLO
}

// parseLoadgen reads the flags and the environment (getenv) into a
// Config. Secrets come from the environment only: a flag shows in the
// process list.
func parseLoadgen(args []string, getenv func(string) string, stderr io.Writer) (loadgen.Config, loadgenOpts, error) {
	fs := newFlags("loadgen", stderr)
	var (
		cfg loadgen.Config
		o   loadgenOpts
		raw = loadgenRaw{rate: rateFlag{1000}, peak: rateFlag{38000}, gifts: rateFlag{10}}
	)
	declareLoadgenFlags(fs, &cfg, &o, &raw)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: danmaku loadgen [flags]

Plays an audience against a deployment through its public API: users with
their own tickets and entries post comments, a business server posts gifts,
SDK pollers read the CDN and time delivery. Prints a progress line a second
on stderr and a summary on stdout. See docs/loadgen.md.

Environment: DANMAKU_TICKET_KEY signs the users' tickets (default: the dev
key, which only danmaku dev accepts); DANMAKU_GIFT_KEY is the gift API's
service key (default: dev-service-key).

`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return cfg, o, err
	}
	if o.sloPath != "" && o.htmlPath == "" {
		return cfg, o, usageError{errors.New("-slo judges the -html report: give -html too")}
	}
	if o.htmlPath != "" && o.entryPulse {
		return cfg, o, usageError{errors.New("-html writes an audience's report, not -entry-pulse's")}
	}
	if o.merge {
		if fs.NArg() == 0 {
			return cfg, o, usageError{errors.New("-merge needs the report files to merge")}
		}
		o.mergeFiles = fs.Args()
		return cfg, o, nil
	}
	if fs.NArg() > 0 {
		return cfg, o, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if o.procs < 1 {
		return cfg, o, usageError{errors.New("-procs must be at least 1")}
	}
	if o.procs > 1 {
		if err := o.splitRun(fs, &cfg); err != nil {
			return cfg, o, err
		}
	}
	if cfg.Users <= 0 {
		return cfg, o, usageError{errors.New("-users must be positive")}
	}
	if cfg.Pollers == 0 {
		cfg.Pollers = -1
	} else if cfg.Pollers < 0 {
		return cfg, o, usageError{errors.New("-pollers must not be negative")}
	}
	i, n, ok := strings.Cut(raw.shard, "/")
	var err1, err2 error
	cfg.Shard, err1 = strconv.Atoi(i)
	cfg.Shards, err2 = strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || cfg.Shards < 1 || cfg.Shard < 0 || cfg.Shard >= cfg.Shards {
		return cfg, o, usageError{fmt.Errorf("-shard %q: i/n with 0 ≤ i < n", raw.shard)}
	}
	cfg.Rate, cfg.PulsePeak, cfg.GiftRate = off(raw.rate.v), off(raw.peak.v), off(raw.gifts.v)
	cfg.JoinRate = raw.joinRate.v
	if cfg.Keyword != "" {
		cfg.KeywordShare = raw.kwShr
	}
	if cfg.Pattern == loadgen.PatternPulse && raw.peak.v == 0 {
		return cfg, o, usageError{errors.New("-pattern pulse needs a -pulse-peak above 0")}
	}
	if raw.slcr != "" {
		cfg.SlicerMetrics = strings.Split(raw.slcr, ",")
	}
	if raw.ingm != "" {
		cfg.IngestMetrics = strings.Split(raw.ingm, ",")
	}
	if raw.nodem != "" {
		cfg.NodeMetrics = strings.Split(raw.nodem, ",")
	}
	if k := getenv("DANMAKU_TICKET_KEY"); k != "" {
		if cfg.DevTickets {
			return cfg, o, usageError{errors.New("-dev-tickets and DANMAKU_TICKET_KEY exclude each other")}
		}
		cfg.TicketKey = []byte(k)
	}
	cfg.GiftKey = getenv("DANMAKU_GIFT_KEY")
	return cfg, o, nil
}

// loadgenRaw are the loadgen flags read as typed, before parseLoadgen
// checks them into the Config.
type loadgenRaw struct {
	rate, peak, gifts rateFlag
	joinRate          rateFlag
	shard, slcr, ingm string
	nodem             string
	kwShr             float64
}

// declareLoadgenFlags declares the loadgen flags on fs, into cfg, o and
// raw.
func declareLoadgenFlags(fs *flag.FlagSet, cfg *loadgen.Config, o *loadgenOpts, raw *loadgenRaw) {
	fs.StringVar(&cfg.GSLB, "gslb", "http://"+stack.DefaultGSLBAddr, "entry endpoint (gslb) base URL")
	fs.StringVar(&cfg.Room, "room", stack.DemoRoom, "room to load (must belong to a live event)")
	fs.IntVar(&cfg.Users, "users", 10_000, "distinct simulated viewers who comment (all shards together)")
	fs.StringVar(&raw.shard, "shard", "0/1", "i/n: play the users whose index mod n is i, and 1/n of every rate and of the pollers (run n processes, i = 0..n-1)")
	fs.Var(&raw.rate, "rate", "comments per second: the steady rate, or after a pulse's hold (0: none)")
	fs.StringVar(&cfg.Pattern, "pattern", loadgen.PatternSteady, "steady, or pulse: 0 → -pulse-peak over -pulse-ramp, held -pulse-hold, then -rate")
	fs.Var(&raw.peak, "pulse-peak", "peak comments per second of a pulse")
	fs.DurationVar(&cfg.PulseRamp, "pulse-ramp", 10*time.Second, "how long a pulse climbs from 0 to its peak")
	fs.DurationVar(&cfg.PulseHold, "pulse-hold", 0, "how long a pulse holds its peak (0: to the end)")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long comments and gifts are offered")
	fs.BoolVar(&cfg.Unthrottled, "unthrottled", false, "let users post faster than the SDK's send throttle (one comment per 1.2 s)")
	fs.StringVar(&cfg.Keyword, "keyword", "", "lottery entries: comments say exactly this text, as viewers typing the host's keyword do (not traced end to end)")
	fs.Float64Var(&raw.kwShr, "keyword-share", 1, "fraction of the comments that are -keyword entries, the rest traced phrases (0 < f ≤ 1)")
	fs.Var(&raw.gifts, "gifts", "gift orders per second through the gift API (0: none)")
	fs.IntVar(&cfg.GiftConcurrency, "gift-concurrency", 16, "gift POSTs in flight at most, retries included (raise it for a gift flood, or to keep sending new orders while a failover's retry)")
	fs.DurationVar(&cfg.GiftRetryFor, "gift-retry-for", 30*time.Second, "how long an order that fails for now (network, 5xx, 429) is retried with its order id before it is given up, as a business server does: longer than a Redis failover")
	fs.StringVar(&cfg.GiftIngest, "gift-ingest", "", "ingest base URL for gifts (default: the ingests the entries name, in turn)")
	fs.IntVar(&cfg.Pollers, "pollers", 100, "SDK viewers polling the CDN to time delivery (0: none)")
	fs.BoolVar(&cfg.PollerEdge, "poller-edge", false, "pollers also hold the edge WebSocket, as apps do")
	fs.BoolVar(&cfg.DevTickets, "dev-tickets", false, "fetch tickets from danmaku dev's GET /v1/dev/ticket (default: mint them, with DANMAKU_TICKET_KEY or the dev key)")
	fs.StringVar(&raw.ingm, "ingest-metrics", "", "comma-separated base URLs of the ingests' metrics listeners (-metrics-addr) to read drop counters from (default: the ingests the entries name, at their public URLs, as dev serves them)")
	fs.StringVar(&raw.nodem, "node-metrics", "", "comma-separated base URLs of more nodes (gslbs, edges, slicers) whose /metrics give the -html report's per-node figures (default: the ingest and slicer metrics endpoints only)")
	fs.StringVar(&raw.slcr, "slicer-metrics", "", "comma-separated slicer base URLs to read segment counters from (default: the ingests', which in dev hold them)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "comment POSTs in flight at most (workers and pooled connections; default: the peak rate × 250 ms, 256 to 8192)")
	fs.IntVar(&cfg.EntryConcurrency, "entry-concurrency", 64, "entry fetches in flight at most while users join")
	fs.Var(&raw.joinRate, "join-rate", "pollers and users join at this many a second (all shards together), as the plan's join_per_s has an audience arrive (0: all at once, -entry-concurrency users at a time)")
	fs.DurationVar(&cfg.RefreshEvery, "refresh-every", 0, "users re-fetch their entry at least this often (0: at 80 % of the token's life, as the SDK does); a soak shorter than a token's life sets it to see several refreshes")
	fs.DurationVar(&cfg.HTTPTimeout, "http-timeout", 10*time.Second, "bound of every request")
	fs.IntVar(&o.procs, "procs", 1, "run the load in this many child processes (each -shard i/procs, with its own descriptor limit) and merge their reports")
	fs.BoolVar(&o.merge, "merge", false, "merge the JSON reports named as arguments (one run's shards) instead of running: danmaku loadgen -merge [-json out] a.json b.json")
	fs.DurationVar(&cfg.Drain, "drain", 0, "longest wait after the offer for the pollers to decode (default: 2 segments + publish delay + 2s)")
	fs.StringVar(&cfg.UserPrefix, "user-prefix", "lg", "prefix of the simulated user ids (users PREFIXn, pollers PREFIXpn)")
	fs.StringVar(&cfg.RunID, "run-id", "", "tag of this run's comments and order ids (default: random)")
	fs.BoolVar(&o.entryPulse, "entry-pulse", false, "instead of an audience, a closed-loop pulse at GET /v1/entry: workers rise from 0 to -pulse-workers over -pulse-ramp, /healthz timed alongside; reports admitted/s per second and per source (docs/api-limits.md)")
	fs.StringVar(&o.pulseSources, "pulse-sources", "", "-entry-pulse: comma-separated local addresses to send from in turn, so that per-IP limits see several clients (e.g. 127.0.0.2,127.0.0.3)")
	fs.IntVar(&o.pulseWorkers, "pulse-workers", 256, "-entry-pulse: requests in flight at the peak")
	fs.StringVar(&o.jsonPath, "json", "", "write the report as JSON to this file (-: stdout, and the summary to stderr)")
	fs.StringVar(&o.htmlPath, "html", "", "also write the report as one self-contained HTML page (charts, per-node figures, a verdict against -slo) to this file")
	fs.StringVar(&o.sloPath, "slo", "", "service levels the -html report judges the run against: a JSON file as danmaku plan -slo-out writes it (default: segment + 400 ms barrage p99, 100 ms gift p99 over the edge, 500 ms entry p99, every gift delivered, 99 % of comments shown; docs/loadgen.md)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress line")
	fs.StringVar(&o.logLevel, "log-level", "error", "level of the pollers' SDK logs on stderr")
}

// splitRun prepares a run split over o.procs children: one run id, and
// the flags set here passed on to each child.
func (o *loadgenOpts) splitRun(fs *flag.FlagSet, cfg *loadgen.Config) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["shard"] {
		return usageError{errors.New("-procs splits the run itself: leave out -shard")}
	}
	if cfg.RunID == "" {
		// One tag for every child, so that their comments and orders
		// read as one run.
		cfg.RunID = fmt.Sprintf("%05x", time.Now().UnixNano()&0xfffff)
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "procs", "json", "quiet", "run-id", "html", "slo":
			return
		}
		o.childArgs = append(o.childArgs, "-"+f.Name+"="+f.Value.String())
	})
	o.childArgs = append(o.childArgs, "-run-id="+cfg.RunID)
	return nil
}

func runLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, o, err := parseLoadgen(args, os.Getenv, stderr)
	if err != nil {
		return err
	}
	// The service levels are read before the run: a bad file fails now,
	// not after a minute of load.
	slo, err := readSLO(o.sloPath)
	if err != nil {
		return err
	}
	o.slo = slo
	if o.merge {
		return mergeReports(o, stdout, stderr)
	}
	if o.entryPulse {
		return runEntryPulse(ctx, cfg, o, stdout, stderr)
	}
	if o.procs > 1 {
		rep, err := runChildren(ctx, o, stderr)
		if err != nil {
			return err
		}
		return writeAudienceReport(rep, o, stdout, stderr)
	}
	log, err := newLogger(stderr, o.logLevel, false)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if !o.quiet {
		cfg.Progress = stderr
		cfg.ProgressInPlace = isTerminal(stderr)
	}
	g, err := loadgen.New(cfg)
	if err != nil {
		return usageError{err}
	}
	if need, limit := g.Config().OpenFiles(), openFileLimit(); limit > 0 && need > limit {
		return usageError{fmt.Errorf("this run may hold %d descriptors and the process may open %d (ulimit -n): lower -concurrency or -pollers, or split the run over processes with -shard i/n", need, limit)}
	}
	rep, err := g.Run(ctx)
	if err != nil {
		return err
	}
	return writeAudienceReport(rep, o, stdout, stderr)
}

// runEntryPulse runs -entry-pulse and writes its report.
func runEntryPulse(ctx context.Context, cfg loadgen.Config, o loadgenOpts, stdout, stderr io.Writer) error {
	pc := loadgen.EntryPulseConfig{GSLB: cfg.GSLB, Room: cfg.Room, TicketKey: cfg.TicketKey, Ramp: cfg.PulseRamp, Workers: o.pulseWorkers, HTTPTimeout: cfg.HTTPTimeout}
	if o.pulseSources != "" {
		pc.Sources = strings.Split(o.pulseSources, ",")
	}
	rep, err := loadgen.RunEntryPulse(ctx, pc)
	if err != nil {
		return err
	}
	return writeReport(rep, o, stdout, stderr)
}

// writeReport writes the summary (stdout, or stderr when the JSON goes to
// stdout) and the JSON report when asked.
func writeReport(rep interface{ WriteText(io.Writer) error }, o loadgenOpts, stdout, stderr io.Writer) error {
	text := stdout
	if o.jsonPath == "-" {
		text = stderr
	}
	if err := rep.WriteText(text); err != nil {
		return err
	}
	if o.jsonPath == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if o.jsonPath == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(o.jsonPath, b, 0o644)
}

// writeAudienceReport writes an audience's report as writeReport does,
// and as an HTML page when -html asks.
func writeAudienceReport(rep *loadgen.Report, o loadgenOpts, stdout, stderr io.Writer) error {
	if err := writeReport(rep, o, stdout, stderr); err != nil {
		return err
	}
	if o.htmlPath == "" {
		return nil
	}
	slo := htmlreport.DefaultSLO(rep.Run.SegmentMs, rep.Delivery.Edge)
	if o.slo != nil {
		slo = *o.slo
	}
	var b bytes.Buffer
	if err := htmlreport.Write(&b, rep, slo); err != nil {
		return err
	}
	if err := os.WriteFile(o.htmlPath, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-html: %w", err)
	}
	v := htmlreport.Judge(rep, slo)
	verdict := "pass"
	if !v.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(stderr, "html report: %s (service levels: %s)\n", o.htmlPath, verdict)
	return nil
}

// readSLO reads -slo's file; nil without one.
func readSLO(path string) (*htmlreport.SLO, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("-slo: %w", err)}
	}
	defer f.Close()
	s, err := htmlreport.ReadSLO(f)
	if err != nil {
		return nil, usageError{fmt.Errorf("-slo %s: %w", path, err)}
	}
	return &s, nil
}

// openFileLimit is the process's descriptor limit, 0 if unknown.
func openFileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// mergeReports reads one run's shard reports and writes the merged one.
func mergeReports(o loadgenOpts, stdout, stderr io.Writer) error {
	var rs []*loadgen.Report
	for _, f := range o.mergeFiles {
		r, err := readReport(f)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	rep, err := loadgen.Merge(rs)
	if err != nil {
		return err
	}
	return writeAudienceReport(rep, o, stdout, stderr)
}

func readReport(path string) (*loadgen.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var r loadgen.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	return &r, nil
}

// runChildren runs the load as o.procs processes of this binary, each one
// shard (-shard i/procs: its users, 1/procs of every rate and of the
// pollers, its own descriptor limit), relays their progress lines with the
// shard in front, and merges their reports. An interrupt reaches every
// child (same process group on a terminal; forwarded otherwise), and each
// still reports what it sent.
func runChildren(ctx context.Context, o loadgenOpts, stderr io.Writer) (*loadgen.Report, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("-procs: cannot find this program to start it again: %w", err)
	}
	dir, err := os.MkdirTemp("", "danmaku-loadgen-")
	if err != nil {
		return nil, fmt.Errorf("-procs: %w", err)
	}
	defer os.RemoveAll(dir)
	type child struct {
		cmd  *exec.Cmd
		json string
		done chan struct{}
	}
	var (
		children []*child
		outMu    sync.Mutex
	)
	for i := range o.procs {
		c := &child{json: filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)), done: make(chan struct{})}
		args := append([]string{"loadgen"}, o.childArgs...)
		args = append(args, fmt.Sprintf("-shard=%d/%d", i, o.procs), "-json="+c.json)
		if o.quiet {
			args = append(args, "-quiet")
		}
		c.cmd = exec.CommandContext(ctx, exe, args...)
		c.cmd.Cancel = func() error { return c.cmd.Process.Signal(os.Interrupt) }
		c.cmd.WaitDelay = 2 * time.Minute // an interrupted child still drains and reports
		c.cmd.Stdout = io.Discard         // its summary; the merged one is printed
		pr, err := c.cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		if err := c.cmd.Start(); err != nil {
			return nil, fmt.Errorf("-procs: starting shard %d: %w", i, err)
		}
		children = append(children, c)
		prefix := fmt.Sprintf("[%d/%d] ", i, o.procs)
		go func() {
			defer close(c.done)
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				outMu.Lock()
				fmt.Fprintln(stderr, prefix+sc.Text())
				outMu.Unlock()
			}
		}()
	}
	var failed []string
	for i, c := range children {
		<-c.done // all output read before Wait closes the pipe
		if err := c.cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("shard %d: %v", i, err))
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("-procs: %s", strings.Join(failed, "; "))
	}
	var rs []*loadgen.Report
	for _, c := range children {
		r, err := readReport(c.json)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return loadgen.Merge(rs)
}
