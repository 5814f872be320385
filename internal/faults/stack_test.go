package faults

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/internal/loadgen"
	"danmaku/internal/redisx"
	"danmaku/internal/testenv"
	"danmaku/sdk"
	"danmaku/sdk/wire"
)

// The stack's fixed settings. The keys are test keys, never a deployment's.
const (
	room      = "rel"
	s3Prefix  = "rel/"
	ticketKey = "reliability-test-ticket-key-0123456789"
	giftKey   = "svc-key"
	opKey     = "op-key"
	// roleReady is what a role logs once it serves.
	roleReady = "press Ctrl-C to stop"
	// stopWait is how long a stopping role may take (an edge drains over
	// edgeDrain) before it is killed.
	stopWait  = 15 * time.Second
	edgeDrain = "5s"
	// giftRetryFor is how long the load's business server retries a gift
	// order (docs/api.md: longer than a Redis failover).
	giftRetryFor = 30 * time.Second
)

// danmakuBuild is the danmaku command the roles run, built once per test
// binary. The test-only tag faultclock lets a role run with its clock off
// (stackOpts.clocks); production builds have no such code. The soak adds
// to its Env (fixedHeapBase) before its first use.
var danmakuBuild = &testenv.Build{Pkg: "danmaku/cmd/danmaku", Tags: []string{"faultclock"}}

func danmakuBinary(t testing.TB) string {
	t.Helper()
	return danmakuBuild.Path(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	danmakuBuild.Remove()
	os.Exit(code)
}

// proc is one role process.
type proc struct {
	name, role     string
	addr, metrics  string // its public listener and its /metrics listener
	cmd            *exec.Cmd
	logPath        string
	done           chan struct{}
	stopOnce       sync.Once
	startedAt      time.Time
	signalledAt    time.Time
	signalledWith  syscall.Signal
	signalledMutex sync.Mutex
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the role's process group.
func (p *proc) signal(sig syscall.Signal) {
	p.signalledMutex.Lock()
	p.signalledAt, p.signalledWith = time.Now(), sig
	p.signalledMutex.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// stop ends the role (SIGTERM, then SIGKILL after stopWait).
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(stopWait):
			}
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// stackOpts shape one row's stack.
type stackOpts struct {
	// cluster: a Redis Cluster (three masters, three replicas) instead
	// of one server, and gifts answered once a replica holds them.
	cluster bool
	// replicas per Cluster master (zero: 1).
	replicas int
	// partitionEdge: edge-2 reaches Redis through a proxy the row cuts.
	partitionEdge bool
	// quick: the short variant's stack (TestFaultTableQuick): no
	// Prometheus (no alerts column), and every role SIGKILLed at the end
	// rather than stopped one by one (an edge drains for edgeDrain).
	quick bool
	// counts are the machines per role ("gslb", "ingest", "edge",
	// "slicer") as a plan sized them; a role absent: 2.
	counts map[string]int
	// roleEnv is added to every role's environment (GOMAXPROCS as the
	// plan's vCPU).
	roleEnv []string
	// clocks runs nodes ("ingest-1") with their clock off by a duration
	// ("2s", "-2s") from their start (DANMAKU_FAULT_CLOCK_OFFSET).
	clocks map[string]string
}

// count is how many of role the stack runs.
func (o stackOpts) count(role string) int {
	if n := o.counts[role]; n > 0 {
		return n
	}
	return 2
}

// stack is the local real stack of one row: backends, two of each role
// with peers, a balancer in front of the gslbs, Prometheus with the rules.
type stack struct {
	t         *testing.T
	bin       string
	s3        testenv.S3Env
	s3srv     *testenv.Server
	cdn       string
	varnish   *testenv.Server
	redisURL  string
	cluster   *testenv.Cluster
	rdb       redis.UniversalClient
	lb        *Proxy // in front of the gslbs
	giftLB    *Proxy // in front of the ingests: the business server's way in
	edgeRedis *Proxy // edge-2's way to Redis (partitionEdge)
	procs     map[string]*proc
	clocks    map[string]string // stackOpts.clocks
	note      string            // a row's own observation, added to its Note
	order     []string
	prom      string
	env       []string
}

func newStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	s := &stack{t: t, bin: danmakuBinary(t), procs: map[string]*proc{}, clocks: o.clocks}
	s.s3, s.s3srv = testenv.S3Restartable(t)
	s.cdn, s.varnish = testenv.VarnishRestartable(t, s.s3.BucketURL())
	if o.cluster {
		s.cluster = testenv.RedisClusterWith(t, testenv.ClusterConfig{Replicas: o.replicas})
		s.redisURL = s.cluster.URL()
		s.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.cluster.Addrs()})
	} else {
		s.redisURL = testenv.Redis(t)
		s.rdb = redis.NewClient(&redis.Options{Addr: s.redisURL})
	}
	t.Cleanup(func() { _ = s.rdb.Close() })
	s.env = append(os.Environ(),
		"DANMAKU_REDIS="+s.redisURL,
		"DANMAKU_S3_BUCKET="+s.s3.Bucket, "DANMAKU_S3_ENDPOINT="+s.s3.Endpoint, "DANMAKU_S3_REGION="+s.s3.Region,
		"DANMAKU_S3_PATH_STYLE=true", "DANMAKU_S3_PREFIX="+s3Prefix,
		"DANMAKU_S3_ACCESS_KEY="+s.s3.AccessKey, "DANMAKU_S3_SECRET_KEY="+s.s3.SecretKey,
		"DANMAKU_GIFT_KEYS="+giftKey, "DANMAKU_OPERATOR_KEYS="+opKey,
		"DANMAKU_TICKET_KEY="+ticketKey,
		"DANMAKU_MASTER_KEY="+hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
	)
	s.env = append(s.env, o.roleEnv...)
	if o.partitionEdge {
		if o.cluster {
			t.Fatal("a cluster client learns every node's address: the partition proxy takes one server")
		}
		p, err := NewProxy(s.redisURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		s.edgeRedis = p
	}
	var gslbs []string
	for i := 1; i <= o.count("gslb"); i++ {
		p := s.start("gslb", i, nil, "-cdn", s.cdn+"/"+s3Prefix, "-gslb-nodes", strconv.Itoa(o.count("gslb")))
		gslbs = append(gslbs, p.addr)
	}
	lb, err := NewProxy(gslbs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	s.lb = lb
	var ingestExtra []string
	if o.cluster {
		ingestExtra = []string{"-gift-wait-replicas", "1"}
	}
	var ingests []string
	for i := 1; i <= o.count("ingest"); i++ {
		p := s.start("ingest", i, nil, append([]string{"-audit-dir", t.TempDir()}, ingestExtra...)...)
		ingests = append(ingests, p.addr)
	}
	// A business server posts gifts through a balancer, not to one ingest.
	if s.giftLB, err = NewProxy(ingests...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.giftLB.Close() })
	for i := 1; i <= o.count("edge"); i++ {
		var env []string
		if i == 2 && s.edgeRedis != nil {
			env = []string{"DANMAKU_REDIS=" + s.edgeRedis.Addr()}
		}
		s.start("edge", i, env, "-edge-drain", edgeDrain)
	}
	for i := 1; i <= o.count("slicer"); i++ {
		s.start("slicer", i, nil, "-audit-dir", t.TempDir())
	}
	s.createEvent()
	s.awaitRoom()
	if o.quick {
		// Registered last, so run first: the procs' own stops then find
		// them gone.
		t.Cleanup(func() {
			for _, n := range s.order {
				_ = syscall.Kill(-s.procs[n].cmd.Process.Pid, syscall.SIGKILL)
			}
		})
		return s
	}
	s.startPrometheus()
	return s
}

// start runs role number i as its own process and waits until it serves.
func (s *stack) start(role string, i int, env []string, extra ...string) *proc {
	t := s.t
	t.Helper()
	p := &proc{name: fmt.Sprintf("%s-%d", role, i), role: role, addr: testenv.FreeAddr(t), metrics: testenv.FreeAddr(t), done: make(chan struct{})}
	args := []string{role, "-" + role, p.addr, "-metrics-addr", p.metrics, "-node-id", p.name, "-log-level", "warn"}
	args = append(args, extra...)
	p.logPath = filepath.Join(t.TempDir(), p.name+".log")
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(s.bin, args...)
	p.cmd.Env = append(slices.Clone(s.env), env...)
	if off, ok := s.clocks[p.name]; ok {
		p.cmd.Env = append(p.cmd.Env, "DANMAKU_FAULT_CLOCK_OFFSET="+off)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Its own group (a signal reaches it alone), and killed with the
	// driver should the driver die first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	p.startedAt = time.Now()
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() || os.Getenv("DANMAKU_FAULTS_LOGS") != "" {
			b, _ := os.ReadFile(p.logPath)
			t.Logf("%s log:\n%s", p.name, tail(string(b), 30))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(p.logPath)
		if strings.Contains(string(b), roleReady) {
			if off, ok := s.clocks[p.name]; ok && !strings.Contains(string(b), "faultclock: this process's clock is") {
				t.Fatalf("%s was to run %s off, but its binary did not say so (built without -tags faultclock?)", p.name, off)
			}
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", p.name, tail(string(b), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.procs[p.name] = p
	s.order = append(s.order, p.name)
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// createEvent provisions the room as an operator does.
func (s *stack) createEvent() {
	t := s.t
	t.Helper()
	f := filepath.Join(t.TempDir(), "rel.yaml")
	ev := "id: rel\ntitle: reliability\nstart: now\nend: +2h\nrooms:\n  - id: " + room + "\n    budget: 60\n    shares: [0.1, 0.3, 0.2, 0.4]\n"
	if err := os.WriteFile(f, []byte(ev), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "event", "create", "-gslb", "http://"+s.procs["gslb-1"].addr, "-f", f)
	cmd.Env = append(slices.Clone(s.env), "DANMAKU_OPERATOR_KEY="+opKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("event create: %v\n%s", err, out)
	}
}

// awaitRoom waits until every gslb hands out entries for the room: each
// learns of a new event on its own schedule, and a viewer sent to one
// that has not yet is answered 404 no_such_room, which the SDK takes as
// final.
func (s *stack) awaitRoom() {
	t := s.t
	t.Helper()
	ticket, err := auth.MintTicket([]byte(ticketKey), "probe", auth.Ticket{Nick: "probe"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for _, n := range s.order {
		if s.procs[n].role != "gslb" {
			continue
		}
		for {
			req, _ := http.NewRequest(http.MethodGet, "http://"+s.procs[n].addr+"/v1/entry?room="+room, nil)
			req.Header.Set("Authorization", "Bearer "+ticket)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never handed out an entry for room %s (last: %v)", n, room, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// startPrometheus runs a real Prometheus with the configuration `make
// local-up` renders (infra/local/prometheus.sh: the repository's rule
// files), scraping every role's /metrics each second.
func (s *stack) startPrometheus() {
	t := s.t
	t.Helper()
	var targets []string
	for _, n := range s.order {
		p := s.procs[n]
		targets = append(targets, p.role+"="+p.metrics)
	}
	cmd := exec.Command("bash", "../../infra/local/prometheus.sh", "config")
	cmd.Env = append(os.Environ(), "DANMAKU_LOCAL_DIR="+t.TempDir(),
		"DANMAKU_PROMETHEUS_TARGETS="+strings.Join(targets, ","), "DANMAKU_PROMETHEUS_INTERVAL=1s")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("prometheus.sh config: %v", err)
	}
	s.prom = testenv.Prometheus(t, string(out))
}

// leader is the node id holding the room's slicer lease.
func (s *stack) leader(ctx context.Context) (string, error) {
	return s.rdb.Get(ctx, redisx.RoomKey(room, "leader")).Result()
}

// alerts are the alerts Prometheus had pending or firing between from
// and to, as "Name (firing)" or "Name (pending)".
func (s *stack) alerts(from, to time.Time) ([]string, error) {
	q := url.Values{"query": {"ALERTS"}, "start": {strconv.FormatInt(from.Unix(), 10)},
		"end": {strconv.FormatInt(to.Unix()+1, 10)}, "step": {"1"}}
	resp, err := http.Get(s.prom + "/api/v1/query_range?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	state := map[string]string{}
	for _, r := range body.Data.Result {
		n, st := r.Metric["alertname"], r.Metric["alertstate"]
		if state[n] != "firing" {
			state[n] = st
		}
	}
	var out []string
	for _, n := range slices.Sorted(mapsKeys(state)) {
		out = append(out, n+" ("+state[n]+")")
	}
	return out, nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// segmentGifts reads every segment of the room from S3 and returns how
// many distinct gift ids they hold and how many of those appear in more
// than one segment.
func (s *stack) segmentGifts(ctx context.Context) (distinct, doubled int64, err error) {
	c := s.s3.Client()
	seen := map[string]int{}
	var token *string
	for {
		page, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.s3.Bucket), Prefix: aws.String(s3Prefix), ContinuationToken: token})
		if err != nil {
			return 0, 0, fmt.Errorf("list: %w", err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if strings.HasSuffix(key, ".json") {
				continue
			}
			obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.s3.Bucket), Key: o.Key})
			if err != nil {
				return 0, 0, fmt.Errorf("get %s: %w", key, err)
			}
			b, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil {
				return 0, 0, fmt.Errorf("get %s: %w", key, err)
			}
			seg, err := wire.DecodeSegment(b)
			if err != nil || seg.Room != room {
				continue
			}
			for _, m := range seg.Messages {
				if m.Kind != wire.KindGift {
					continue
				}
				ids := m.Merged
				if len(ids) == 0 {
					ids = []string{m.ID}
				}
				for _, id := range ids {
					seen[id]++
				}
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		token = page.NextContinuationToken
	}
	for _, n := range seen {
		distinct++
		if n > 1 {
			doubled++
		}
	}
	return distinct, doubled, nil
}

// canary is one viewer the driver watches itself, sampled every 200 ms:
// whether segments keep coming and how late.
type canary struct {
	mu      sync.Mutex
	samples []canarySample
}

type canarySample struct {
	at       time.Time
	segments int64
	lagMs    int64
}

func (s *stack) startCanary(ctx context.Context, wg *sync.WaitGroup) *canary {
	t := s.t
	ticket, err := auth.MintTicket([]byte(ticketKey), "canary", auth.Ticket{Nick: "canary"}, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sdk.New(sdk.Config{EntryURL: "http://" + s.lb.Addr(), Room: room, Ticket: ticket, FirstJoinJitter: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cn := &canary{}
	wg.Go(func() { _ = c.Run(ctx) })
	wg.Go(func() {
		for range c.Messages() {
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				st := c.Stats()
				cn.mu.Lock()
				cn.samples = append(cn.samples, canarySample{at: now, segments: st.SegmentsFetched, lagMs: st.LastSegmentLagMs})
				cn.mu.Unlock()
			}
		}
	})
	return cn
}

// unwell returns the moments the canary had had no new segment for 2 s
// (two segments' time), or its last one came more than 2 s after its end.
func (cn *canary) unwell() []time.Time {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	var out []time.Time
	lastNew := time.Time{}
	for i, sm := range cn.samples {
		if i == 0 || sm.segments > cn.samples[i-1].segments {
			lastNew = sm.at
		}
		if sm.at.Sub(lastNew) > 2*time.Second || sm.lagMs > 2000 {
			out = append(out, sm.at)
		}
	}
	return out
}

// loadRun is one `danmaku loadgen` process.
type loadRun struct {
	cmd        *exec.Cmd
	jsonPath   string
	offerStart chan time.Time
	done       chan error
	stderr     *strings.Builder
	mu         sync.Mutex
}

// load is the offered load; scaled down by the Makefile's variables when
// the machine cannot hold the show's.
type load struct {
	viewers, senders int
	gifts            float64
	offer, drain     time.Duration
	// refresh is loadgen's -refresh-every: how often each sender
	// re-fetches its entry at the least (zero: at 80 % of the token's
	// life, as the SDK does).
	refresh time.Duration
}

func (s *stack) startLoad(l load) *loadRun {
	t := s.t
	t.Helper()
	dir := t.TempDir()
	var ingm, slm []string
	for _, n := range s.order {
		p := s.procs[n]
		switch p.role {
		case "ingest":
			ingm = append(ingm, "http://"+p.metrics)
		case "slicer":
			slm = append(slm, "http://"+p.metrics)
		}
	}
	// Senders comment as often as the SDK's send throttle lets them (one
	// per 1.2 s each): the most a room's real senders post.
	rate := float64(l.senders) / 1.2
	lr := &loadRun{jsonPath: filepath.Join(dir, "load.json"), offerStart: make(chan time.Time, 1), done: make(chan error, 1), stderr: &strings.Builder{}}
	lr.cmd = exec.Command(s.bin, "loadgen", "-gslb", "http://"+s.lb.Addr(), "-room", room,
		"-users", strconv.Itoa(l.senders), "-rate", strconv.FormatFloat(rate, 'f', 1, 64)+"/s",
		"-gifts", strconv.FormatFloat(l.gifts, 'f', 1, 64)+"/s",
		"-gift-ingest", "http://"+s.giftLB.Addr(),
		// As a business server: an order failing for now is retried with
		// its id for longer than a Redis failover, and new orders go out
		// while earlier ones retry (enough in flight for the budget).
		"-gift-retry-for", giftRetryFor.String(),
		"-gift-concurrency", strconv.Itoa(16+int(l.gifts*giftRetryFor.Seconds()/2)),
		"-pollers", strconv.Itoa(l.viewers), "-poller-edge",
		"-duration", l.offer.String(), "-drain", l.drain.String(),
		"-ingest-metrics", strings.Join(ingm, ","), "-slicer-metrics", strings.Join(slm, ","),
		"-json", lr.jsonPath)
	if l.refresh > 0 {
		lr.cmd.Args = append(lr.cmd.Args, "-refresh-every", l.refresh.String())
	}
	lr.cmd.Env = append(os.Environ(), "DANMAKU_TICKET_KEY="+ticketKey, "DANMAKU_GIFT_KEY="+giftKey)
	lr.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, err := lr.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	lr.cmd.Stdout = io.Discard
	if err := lr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-lr.cmd.Process.Pid, syscall.SIGKILL)
	})
	go func() {
		sc := bufio.NewScanner(pr)
		first := true
		for sc.Scan() {
			line := sc.Text()
			lr.mu.Lock()
			lr.stderr.WriteString(line + "\n")
			lr.mu.Unlock()
			if first && strings.Contains(line, " sent ") {
				first = false
				// The first progress line ends the offer's first second.
				lr.offerStart <- time.Now().Add(-time.Second)
			}
		}
		lr.done <- lr.cmd.Wait()
	}()
	return lr
}

// awaitOffer waits for the load's offer to begin and returns when it did.
func (lr *loadRun) awaitOffer(t *testing.T) time.Time {
	t.Helper()
	select {
	case at := <-lr.offerStart:
		return at
	case err := <-lr.done:
		t.Fatalf("loadgen ended before its offer: %v\n%s", err, tail(lr.output(), 30))
	case <-time.After(3 * time.Minute):
		t.Fatalf("loadgen's offer never began\n%s", tail(lr.output(), 30))
	}
	return time.Time{}
}

func (lr *loadRun) output() string {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.stderr.String()
}

func (lr *loadRun) report() (*loadgen.Report, error) {
	b, err := os.ReadFile(lr.jsonPath)
	if err != nil {
		return nil, err
	}
	var r loadgen.Report
	return &r, json.Unmarshal(b, &r)
}

// instant evaluates a PromQL query now and returns each series' value by
// the label named by, as reported by Prometheus.
func (s *stack) instant(query, by string) (map[string]float64, error) {
	resp, err := http.Get(s.prom + "/api/v1/query?" + url.Values{"query": {query}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, r := range body.Data.Result {
		v, _ := r.Value[1].(string)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %q", query, v)
		}
		out[r.Metric[by]] = f
	}
	return out, nil
}
