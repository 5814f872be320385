//go:build linux

// Linux: the clients bind addresses of 127.0.0.0/8 besides 127.0.0.1.

package terraform_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/redisx"
	"danmaku/internal/rules"
	"danmaku/internal/testenv"
	"danmaku/internal/tlsx/tlsxtest"
)

// TestConformance is the deployment conformance test: it starts every role
// as a machine of this module starts it, and shows on real servers what the
// deployment must hold.
//
// How a role is started, and what stands in for AWS:
//
//   - The module is applied with the mocked provider (test.sh render,
//     testdata/conformance): an event with node TLS on and edge_max_conns
//     = 100. Its string outputs go into a state file, and each role's env
//     file is what env.sh prints from it — checked equal to the env file in
//     the role's boot user data (BOOT_ENV_B64), which is what a machine
//     writes to /etc/danmaku/danmaku.env. The flags are BOOT_ARGS_B64,
//     written one a line to /etc/danmaku/args as node-boot.sh does.
//   - The role is started by node-boot.sh's own danmaku-start script, cut
//     from node-boot.sh, with the environment systemd gives it (the env
//     file, HOME, nothing of the test's). Secrets come from a stand-in
//     for the AWS CLI on its PATH that answers `aws secretsmanager
//     get-secret-value --secret-id ARN` from values the test chose
//     (Secrets Manager). A machine's filesystem is a directory of its own.
//
// Substitutions, each because the local machine is not an EC2 machine in a
// VPC — everything else is used exactly as rendered:
//
//   - DANMAKU_REDIS: ElastiCache's TLS configuration endpoint becomes a
//     seed of a local Redis Cluster (three masters, a replica each; no
//     TLS). DANMAKU_REDIS_CLUSTER stays true as rendered. The roles' ACL
//     users are created from internal/redisx's table (ElastiCache users).
//   - S3: ingest and slicer get DANMAKU_S3_ENDPOINT, DANMAKU_S3_PATH_STYLE
//     and static keys of a local versitygw (the instance profile); the
//     buckets named in the env files are created there.
//   - DANMAKU_TRUSTED_PROXIES: the ALB's subnets become 127.0.0.2, the
//     address the ALB stand-in (a reverse proxy appending
//     X-Forwarded-For, plain HTTP: the ALB's TLS is not reproduced)
//     connects to the gslb from.
//   - Listen addresses 0.0.0.0:PORT or :PORT (a flag's or a variable's)
//     become 127.0.0.1 and a free port; paths under /etc/danmaku/ are
//     under the machine's directory, where the test writes the certificate
//     and key node-boot.sh's danmaku-tls-fetch would fetch.
//   - Per machine (node-boot.sh): DANMAKU_NODE_ID is a made-up instance id
//     (instance metadata), and an edge's or ingest's public URL is built
//     from BOOT_URL_SCHEME, BOOT_URL_PATH as node-boot.sh builds it, with
//     127.0.0.1 and the local port for the Route 53 name.
//
// What it shows:
//
//	(a) per-client rate limits bind a client and not its neighbours: at
//	    the gslb for two clients behind the same ALB stand-in (and a
//	    forged X-Forwarded-For from an untrusted hop counts the hop), at
//	    the ingest and the edge by each client's own address;
//	(b) an edge at its capacity (-max-conns from the env file) is
//	    skipped by the entry: 503 no_nodes while it is the only edge, the
//	    other edge once one starts;
//	(c) the audit record of a comment lands in the audit bucket on S3;
//	(d) the roles' Redis users are refused none of the roles' commands,
//	    and the edge's is refused a write to the token keys (NOPERM).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("applies the module and starts every role against real servers")
	}
	t.Parallel()
	// The slow parts side by side: Terraform, the build, the servers.
	rendered := make(chan scriptRun, 1)
	limit := guardLimit(t, 10*time.Minute)
	go func() { rendered <- execScript(limit, nil, "render") }()
	dir := t.TempDir()
	bin := filepath.Join(dir, "danmaku")
	built := make(chan error, 1)
	go func() {
		bctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(bctx, "go", "build", "-o", bin, "danmaku/cmd/danmaku").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		built <- err
	}()
	cluster := testenv.RedisCluster(t)
	s3env := testenv.S3(t)
	outputs := renderedOutputs(t, (<-rendered).check(t))
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	// From here on: the roles, which take seconds on a quiet machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	d := newDeployment(t, ctx, dir, bin, outputs)
	d.redisSeed = cluster.Addrs()[0]
	d.s3 = s3env
	for _, role := range redisx.ACLRoles() {
		args, err := redisx.SetUser(role, d.secret("DANMAKU_REDIS_PASSWORD", role))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range cluster.Nodes() {
			if _, err := n.Do(args...); err != nil {
				t.Fatalf("%s: %v", strings.Join(args[:3], " "), err)
			}
		}
	}
	for _, b := range []string{d.env["ingest"]["DANMAKU_AUDIT_S3_BUCKET"], d.env["slicer"]["DANMAKU_S3_BUCKET"]} {
		if _, err := s3env.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatalf("create bucket %s: %v", b, err)
		}
	}

	// One machine of each role, and the first of two edges.
	gslbM, ingestM, edge1, slicerM := d.machine("gslb", 1), d.machine("ingest", 1), d.machine("edge", 1), d.machine("slicer", 1)
	for _, m := range []*machine{gslbM, ingestM, edge1, slicerM} {
		m.start()
	}
	for _, m := range []*machine{gslbM, ingestM, edge1, slicerM} {
		m.ready(t)
	}
	alb := d.albStandIn(t, gslbM.addr)

	// The event, created through the balancer with the operators' key.
	ev := filepath.Join(dir, "event.yaml")
	if err := os.WriteFile(ev, []byte("id: conform\ntitle: conformance\nstart: now\nend: +1h\nrooms:\n  - id: stage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := exec.CommandContext(ctx, bin, "event", "create", "-gslb", alb, "-f", ev)
	cli.Env = append(os.Environ(), "DANMAKU_OPERATOR_KEY="+strings.Split(d.secret("DANMAKU_OPERATOR_KEYS", "gslb"), ",")[0])
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("danmaku event create: %v\n%s", err, out)
	}

	// --- (b) an edge at its capacity is skipped ------------------------------
	capacity := d.env["edge"]["DANMAKU_MAX_CONNS"]
	if capacity != "100" {
		t.Fatalf("DANMAKU_MAX_CONNS of the edges = %q, want the 100 testdata/conformance sets", capacity)
	}
	filler := d.client("127.0.0.20")
	probeUser := 0
	entryProbe := func() entryAnswer {
		probeUser++
		return filler.entry(ctx, alb, d.ticket(t, fmt.Sprintf("probe-%d", probeUser)))
	}
	var first entryAnswer
	waitFor(t, ctx, "the first entry", func() (bool, string) {
		first = entryProbe()
		return first.status == http.StatusOK, first.String()
	})
	if !slices.Equal(first.Edge, []string{edge1.url}) {
		t.Fatalf("entry edges %v, want the one edge %s", first.Edge, edge1.url)
	}
	// 100 connections, at most 8 a user (the edge's per-user cap): the
	// edge's capacity, and then its own refusal of one more.
	tokens := []string{first.Token}
	for i := 1; len(tokens)*8 < 100; i++ {
		a := filler.entry(ctx, alb, d.ticket(t, fmt.Sprintf("fill-%d", i)))
		if a.status != http.StatusOK || !slices.Equal(a.Edge, []string{edge1.url}) {
			t.Fatalf("entry %d while edge 1 fills: %s", i, a)
		}
		tokens = append(tokens, a.Token)
	}
	// The edge reads the events once a second: until it has read the new
	// one, its room is unknown there (404 no_such_room), as for any edge
	// just after an event is created.
	waitFor(t, ctx, "edge 1 to know the event's room", func() (bool, string) {
		st, code := filler.ws(t, ctx, edge1.url, tokens[0])
		if st == http.StatusNotFound && code == "no_such_room" {
			return false, code
		}
		if st != http.StatusSwitchingProtocols {
			t.Fatalf("connection 1 to edge 1: %d %s", st, code)
		}
		return true, ""
	})
	for i := 1; i < 100; i++ {
		if st, code := filler.ws(t, ctx, edge1.url, tokens[i/8]); st != http.StatusSwitchingProtocols {
			t.Fatalf("connection %d to edge 1: %d %s", i+1, st, code)
		}
	}
	if st, code := filler.ws(t, ctx, edge1.url, tokens[len(tokens)-1]); st != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("connection 101 to edge 1 (capacity 100): %d %s, want 503 over_capacity", st, code)
	}
	waitFor(t, ctx, "the entry to skip the full edge (503 no_nodes)", func() (bool, string) {
		a := entryProbe()
		return a.status == http.StatusServiceUnavailable && a.Code == "no_nodes", a.String()
	})
	edge2 := d.machine("edge", 2)
	edge2.start()
	edge2.ready(t)
	waitFor(t, ctx, "the entry to hand out the second edge", func() (bool, string) {
		a := entryProbe()
		if a.status == http.StatusOK && slices.Contains(a.Edge, edge1.url) {
			t.Fatalf("the entry handed out the full edge: %s", a)
		}
		return a.status == http.StatusOK && slices.Equal(a.Edge, []string{edge2.url}), a.String()
	})
	t.Logf("(b) edge 1 at its capacity of %s connections: the entry answered 503 no_nodes, then handed out edge 2 alone", capacity)

	// --- (a) per-client limits -----------------------------------------------
	// Tight rules, pushed as the ingest's rules API does (`danmaku limits
	// push`: a new version of the fleet's rules, written as the ingest's
	// Redis user), so that a burst is a few requests; each role has them in
	// force once a probe address of its own is refused by one of them.
	asIngest := redisClient(t, ctx, redisx.Config{URL: "redis://" + d.redisSeed, Cluster: true, Username: redisx.ACLUser(redisx.ACLIngest), Password: d.secret("DANMAKU_REDIS_PASSWORD", redisx.ACLIngest)})
	const perIP = 3
	limits := fmt.Sprintf(`{"rules":[
		{"name":"conform-entry-ip","route":"GET /v1/entry","key":"ip","algorithm":"local","limit":%[1]d,"per":"1h","burst":%[1]d},
		{"name":"conform-upload-ip","route":"POST /v1/rooms/*","key":"ip","algorithm":"local","limit":%[1]d,"per":"1h","burst":%[1]d},
		{"name":"conform-ws-ip","route":"GET /v1/ws","key":"ip","algorithm":"local","limit":%[1]d,"per":"1h","burst":%[1]d}]}`, perIP)
	if err := rules.CheckLimits([]byte(limits)); err != nil {
		t.Fatal(err)
	}
	if _, err := rules.NewRedisStore(asIngest).Push(ctx, rules.KindLimits, []byte(limits), rules.Meta{By: "conformance", At: time.Now()}); err != nil {
		t.Fatalf("push the rules as %s: %v", redisx.ACLUser(redisx.ACLIngest), err)
	}
	ingestURL := first.Ingest[0]
	barrage := ingestURL + "/v1/rooms/stage/barrage"
	probe := d.client("127.0.0.13")
	for _, p := range []struct {
		rule string
		do   func() (int, string)
	}{
		{"conform-entry-ip", func() (int, string) { a := probe.entry(ctx, alb, ""); return a.status, a.Message }},
		{"conform-upload-ip", func() (int, string) { st, _, msg := probe.post(ctx, barrage, "", "probe"); return st, msg }},
		{"conform-ws-ip", func() (int, string) {
			st, _, msg := probe.get(ctx, strings.Replace(edge2.url, "wss://", "https://", 1))
			return st, msg
		}},
	} {
		waitFor(t, ctx, p.rule+" in force", func() (bool, string) {
			st, msg := p.do()
			return st == http.StatusTooManyRequests && strings.Contains(msg, `"`+p.rule+`"`), fmt.Sprintf("%d %s", st, msg)
		})
	}

	// The gslb behind its balancer: client A bursts, B is served.
	a, b := d.client("127.0.0.11"), d.client("127.0.0.12")
	var aEntry entryAnswer
	for i := 1; ; i++ {
		e := a.entry(ctx, alb, d.ticket(t, "client-a"))
		if e.status == http.StatusOK {
			aEntry = e
			continue
		}
		if e.status != http.StatusTooManyRequests || !strings.Contains(e.Message, `"conform-entry-ip"`) || i != perIP+1 {
			t.Fatalf("client A's entry %d through the balancer: %s; want %d answered, then 429 by conform-entry-ip", i, e, perIP)
		}
		break
	}
	bEntry := b.entry(ctx, alb, d.ticket(t, "client-b"))
	if bEntry.status != http.StatusOK {
		t.Fatalf("client B through the same balancer after A's burst: %s, want 200", bEntry)
	}
	// A hop the gslb does not trust is counted itself, whatever address it
	// forwards: here A's, which is over the limit.
	hop := d.client("127.0.0.14")
	if e := hop.entryVia(ctx, "http://"+gslbM.addr, d.ticket(t, "hop"), "127.0.0.11"); e.status != http.StatusOK {
		t.Fatalf("an untrusted hop forwarding A's address: %s, want 200 (the hop counts, not A)", e)
	}
	t.Logf("(a) gslb: client A refused after %d entries through the balancer, client B served; an untrusted hop's X-Forwarded-For ignored", perIP)

	// The ingest (TLS in the role, no proxy): the client's own address.
	comment := "conformance audit " + hex.EncodeToString(randomBytes(t, 4))
	for i := 1; ; i++ {
		st, code, msg := a.post(ctx, barrage, aEntry.Token, fmt.Sprintf("from A %d", i))
		if st == http.StatusOK {
			continue
		}
		if st != http.StatusTooManyRequests || code != "rate_limited" || !strings.Contains(msg, `"conform-upload-ip"`) || i != perIP+1 {
			t.Fatalf("client A's comment %d: %d %s %s; want %d answered, then 429 by conform-upload-ip", i, st, code, msg, perIP)
		}
		break
	}
	if st, code, msg := b.post(ctx, barrage, bEntry.Token, comment); st != http.StatusOK {
		t.Fatalf("client B's comment after A's burst: %d %s %s, want 200", st, code, msg)
	}
	// The edge (TLS in the role): the same.
	for i := 1; ; i++ {
		st, code := a.ws(t, ctx, edge2.url, aEntry.Token)
		if st == http.StatusSwitchingProtocols {
			continue
		}
		if st != http.StatusTooManyRequests || code != "rate_limited" || i != perIP+1 {
			t.Fatalf("client A's connection %d to edge 2: %d %s; want %d upgraded, then 429 rate_limited", i, st, code, perIP)
		}
		break
	}
	if st, code := b.ws(t, ctx, edge2.url, bEntry.Token); st != http.StatusSwitchingProtocols {
		t.Fatalf("client B's connection to edge 2 after A's burst: %d %s, want 101", st, code)
	}
	t.Logf("(a) ingest and edge: client A refused after %d requests, client B served", perIP)

	// --- (d) the edge's Redis user and the token keys -------------------------
	edgeUser := d.env["edge"]["DANMAKU_REDIS_USER"]
	if edgeUser != redisx.ACLUser(redisx.ACLEdge) {
		t.Fatalf("the edges' DANMAKU_REDIS_USER = %q, want %q (internal/redisx)", edgeUser, redisx.ACLUser(redisx.ACLEdge))
	}
	// Everything so far ran as the roles' users: Redis refused none of it.
	for i, n := range cluster.Nodes() {
		log, err := n.Do("ACL", "LOG")
		if err != nil {
			t.Fatal(err)
		}
		if entries, _ := log.([]any); len(entries) > 0 {
			t.Fatalf("Redis node %d refused the roles %d times: %v", i, len(entries), entries)
		}
	}
	asEdge := redisClient(t, ctx, redisx.Config{URL: "redis://" + d.redisSeed, Cluster: true, Username: edgeUser, Password: d.secret("DANMAKU_REDIS_PASSWORD", "edge")})
	if err := asEdge.Set(ctx, redisx.Prefix+"{auth}:epoch:1", "forged", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("SET on a token key as %s: %v, want NOPERM", edgeUser, err)
	}
	t.Logf("(d) %s: SET %s{auth}:epoch:1 refused with NOPERM", edgeUser, redisx.Prefix)

	// --- (c) the comment's audit record in the audit bucket -------------------
	// A stopping ingest writes what it holds (a running one writes each
	// minute after it ends).
	ingestM.stop(t)
	bucket := d.env["ingest"]["DANMAKU_AUDIT_S3_BUCKET"]
	found := findAudit(t, ctx, s3env.Client(), bucket, comment)
	if found.User != "client-b" || found.Room != "stage" {
		t.Fatalf("audit record %+v, want client-b's comment in stage", found)
	}
	t.Logf("(c) the audit record of %q (%s) is in s3://%s", comment, found.Decision, bucket)
}

// renderedOutputs parses test.sh render's JSON lines: the root outputs of
// the apply, by name.
func renderedOutputs(t *testing.T, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var line struct {
			Type      string `json:"type"`
			TestState struct {
				Outputs map[string]struct {
					Value any `json:"value"`
				} `json:"outputs"`
			} `json:"test_state"`
		}
		if err := dec.Decode(&line); err == io.EOF {
			t.Fatal("test.sh render printed no state (terraform test -verbose -json)")
		} else if err != nil {
			t.Fatalf("test.sh render: %v", err)
		}
		if line.Type != "test_state" {
			continue
		}
		outs := map[string]any{}
		for k, v := range line.TestState.Outputs {
			outs[k] = v.Value
		}
		return outs
	}
}

// deployment is the event the module rendered, on this machine.
type deployment struct {
	t   *testing.T
	ctx context.Context
	dir string
	bin string
	// env is each role's env file as env.sh printed it, by variable.
	env map[string]map[string]string
	// envFile is that file, as text.
	envFile map[string]string
	// boot is each role's BOOT_* settings from its user data.
	boot map[string]map[string]string
	// start is node-boot.sh's danmaku-start script.
	start     string
	secrets   map[string]string // by ARN
	redisSeed string
	s3        testenv.S3Env
	cert, key []byte
	clientTLS *tls.Config // trusts the node certificate
}

var (
	bootLine = regexp.MustCompile(`^(BOOT_[A-Z0-9_]+)='([^']*)'$`)
	// anyAddress is a listen address on every interface: 0.0.0.0:PORT or
	// :PORT.
	anyAddress = regexp.MustCompile(`^(0\.0\.0\.0)?:[0-9]+$`)
)

func newDeployment(t *testing.T, ctx context.Context, dir, bin string, outputs map[string]any) *deployment {
	t.Helper()
	d := &deployment{t: t, ctx: ctx, dir: dir, bin: bin, env: map[string]map[string]string{}, envFile: map[string]string{},
		boot: map[string]map[string]string{}, secrets: map[string]string{}}

	// A state file of the string outputs, and env.sh on it.
	state := map[string]any{"version": 4, "terraform_version": "1.7.0", "serial": 1, "lineage": "conformance", "resources": []any{}}
	outs := map[string]any{}
	for k, v := range outputs {
		if s, ok := v.(string); ok {
			outs[k] = map[string]any{"value": s, "type": "string"}
		}
	}
	state["outputs"] = outs
	stateFile := filepath.Join(dir, "outputs.tfstate")
	writeJSON(t, stateFile, state)
	userData, _ := outputs["boot_user_data"].(map[string]any)
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"gslb", "ingest", "edge", "slicer"} {
		envSh := exec.CommandContext(ctx, "bash", filepath.Join(here, "env.sh"), stateFile, role)
		envSh.Dir = dir
		out, err := envSh.Output()
		if err != nil {
			t.Fatalf("env.sh STATE %s: %v\n%s", role, err, stderrOf(err))
		}
		d.envFile[role] = string(out)
		d.env[role] = parseEnvFile(t, role, string(out))
		ud, _ := userData[role].(string)
		boot := map[string]string{}
		for line := range strings.SplitSeq(ud, "\n") {
			if m := bootLine.FindStringSubmatch(line); m != nil {
				boot[m[1]] = m[2]
			}
		}
		if boot["BOOT_ROLE"] != role {
			t.Fatalf("the %s machines' user data has no BOOT_ROLE='%s':\n%.2000s", role, role, ud)
		}
		fromBoot, err := base64.StdEncoding.DecodeString(boot["BOOT_ENV_B64"])
		if err != nil {
			t.Fatalf("%s BOOT_ENV_B64: %v", role, err)
		}
		if strings.TrimRight(string(fromBoot), "\n") != strings.TrimRight(string(out), "\n") {
			t.Fatalf("the %s env file env.sh prints differs from the one its machines boot with:\nenv.sh:\n%s\nuser data:\n%s", role, out, fromBoot)
		}
		d.boot[role] = boot
	}

	// danmaku-start, as node-boot.sh writes it.
	nodeBoot, err := os.ReadFile("node-boot.sh")
	if err != nil {
		t.Fatal(err)
	}
	const open, end = "cat >/usr/local/bin/danmaku-start <<'EOF'\n", "\nEOF\n"
	_, rest, ok := strings.Cut(string(nodeBoot), open)
	body, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("node-boot.sh writes no /usr/local/bin/danmaku-start (%q ... %q): update conformance_test.go", open, end)
	}
	d.start = body

	// The values behind each "# secret NAME ARN".
	for role, file := range d.envFile {
		for line := range strings.SplitSeq(file, "\n") {
			f := strings.Fields(line)
			if len(f) == 4 && f[0] == "#" && f[1] == "secret" {
				d.secrets[f[3]] = d.secret(f[2], role)
			}
		}
	}

	// The node certificate (Secrets Manager's bundle in a deployment).
	c := tlsxtest.Write(t, t.TempDir(), "danmaku conformance node")
	for _, f := range []struct {
		path string
		to   *[]byte
	}{{c.CertFile, &d.cert}, {c.KeyFile, &d.key}} {
		if *f.to, err = os.ReadFile(f.path); err != nil {
			t.Fatal(err)
		}
	}
	d.clientTLS = tlsxtest.ClientConfig(c.X509)
	return d
}

// secret is the test's value of a secret variable for role.
func (d *deployment) secret(name, role string) string {
	switch name {
	case "DANMAKU_MASTER_KEY":
		return hex.EncodeToString([]byte("conformance-master-key-32-bytes!"))
	case "DANMAKU_REDIS_PASSWORD":
		return "conformance-redis-" + role
	}
	// Long enough for every key's minimum (a ticket key takes 32 bytes).
	return "conformance-" + strings.ToLower(strings.TrimPrefix(name, "DANMAKU_")) + "-0123456789abcdef0123"
}

// ticket mints a business ticket with the event's ticket key.
func (d *deployment) ticket(t *testing.T, user string) string {
	t.Helper()
	s, err := auth.MintTicket([]byte(d.secret("DANMAKU_TICKET_KEY", "gslb")), user, auth.Ticket{Nick: user}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// parseEnvFile reads an env file as systemd's EnvironmentFile does for the
// only form the module writes, KEY='value'; anything else fails t.
func parseEnvFile(t *testing.T, role, file string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for line := range strings.SplitSeq(file, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' || strings.Contains(v[1:len(v)-1], "'") {
			t.Fatalf("%s env file: %q is not KEY='value'", role, line)
		}
		env[k] = v[1 : len(v)-1]
	}
	return env
}

// machine is one EC2 machine of a role, as a directory and a process.
type machine struct {
	d     *deployment
	role  string
	root  string // the machine's /
	addr  string // where the role listens
	url   string // the public URL it announces (edge, ingest)
	cmd   *exec.Cmd
	out   *lineLog
	start func()
	// exited is closed when the process has exited.
	exited chan struct{}
}

// machine sets up machine n of role as node-boot.sh does: its env file,
// args and boot.env under ROOT/etc/danmaku, and its TLS files.
func (d *deployment) machine(role string, n int) *machine {
	t := d.t
	t.Helper()
	m := &machine{d: d, role: role, root: filepath.Join(d.dir, fmt.Sprintf("%s-%d", role, n)), out: &lineLog{changed: make(chan struct{}, 1)}}
	etc := filepath.Join(m.root, "etc", "danmaku")
	for _, p := range []string{filepath.Join(etc, "tls"), filepath.Join(m.root, "run", "danmaku"), filepath.Join(m.root, "bin")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	boot := d.boot[role]

	// The flags: BOOT_ARGS_B64, one a line.
	raw, err := base64.StdEncoding.DecodeString(boot["BOOT_ARGS_B64"])
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(raw), "\n")
	for i, a := range args {
		switch {
		case anyAddress.MatchString(a):
			// The role's own address follows -ROLE; any other listener
			// gets a free port of its own.
			if i > 0 && args[i-1] == "-"+role {
				args[i] = m.addr
			} else {
				args[i] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
			}
		case strings.HasPrefix(a, "/etc/danmaku/"):
			args[i] = filepath.Join(m.root, a)
		}
	}
	if !slices.Contains(args, m.addr) {
		t.Fatalf("%s flags %q: want -%s 0.0.0.0:PORT", role, raw, role)
	}
	writeFile(t, filepath.Join(etc, "args"), strings.Join(args, "\n"))

	// The env file, with the substitutions TestConformance lists.
	env := d.envFile[role]
	set := func(k, v string) {
		old := fmt.Sprintf("\n%s='%s'\n", k, d.env[role][k])
		if !strings.Contains(env, old) {
			t.Fatalf("%s env file has no %s to replace:\n%s", role, k, env)
		}
		env = strings.Replace(env, old, fmt.Sprintf("\n%s='%s'\n", k, v), 1)
	}
	if r := d.env[role]["DANMAKU_REDIS"]; !strings.HasPrefix(r, "rediss://") || d.env[role]["DANMAKU_REDIS_CLUSTER"] != "true" {
		t.Fatalf("%s: DANMAKU_REDIS=%q DANMAKU_REDIS_CLUSTER=%q, want a TLS configuration endpoint", role, r, d.env[role]["DANMAKU_REDIS_CLUSTER"])
	}
	set("DANMAKU_REDIS", "redis://"+d.redisSeed)
	for k, v := range d.env[role] {
		if anyAddress.MatchString(v) {
			set(k, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
		}
	}
	if role == "gslb" {
		set("DANMAKU_TRUSTED_PROXIES", albAddr)
	}
	if d.env[role]["DANMAKU_AUDIT_S3_BUCKET"] != "" || d.env[role]["DANMAKU_S3_BUCKET"] != "" {
		env += fmt.Sprintf("DANMAKU_S3_ENDPOINT='%s'\nDANMAKU_S3_PATH_STYLE='true'\nDANMAKU_S3_ACCESS_KEY='%s'\nDANMAKU_S3_SECRET_KEY='%s'\n",
			d.s3.Endpoint, d.s3.AccessKey, d.s3.SecretKey)
	}
	// What node-boot.sh appends.
	env += fmt.Sprintf("DANMAKU_NODE_ID='i-conform%s%d'\n", role, n)
	if boot["BOOT_URL_ENV"] != "" {
		m.url = fmt.Sprintf("%s://%s%s", boot["BOOT_URL_SCHEME"], m.addr, boot["BOOT_URL_PATH"])
		env += fmt.Sprintf("%s='%s'\n", boot["BOOT_URL_ENV"], m.url)
	}
	writeFile(t, filepath.Join(etc, "danmaku.env"), env)
	writeFile(t, filepath.Join(etc, "boot.env"), fmt.Sprintf("ROLE='%s'\nREGION='%s'\nINSTANCE_ID='i-conform%s%d'\n", role, boot["BOOT_REGION"], role, n))
	if boot["BOOT_TLS_CERT"] != "" {
		writeFile(t, filepath.Join(m.root, boot["BOOT_TLS_CERT"]), string(d.cert))
		writeFile(t, filepath.Join(m.root, boot["BOOT_TLS_KEY"]), string(d.key))
	}

	// danmaku-start, on this machine's paths, and the AWS CLI stand-in.
	script := d.start
	for _, r := range [][2]string{{"/etc/danmaku/", etc + "/"}, {"exec /usr/local/bin/danmaku ", "exec " + d.bin + " "}} {
		if !strings.Contains(script, r[0]) {
			t.Fatalf("node-boot.sh's danmaku-start no longer has %q: update conformance_test.go\n%s", r[0], script)
		}
		script = strings.ReplaceAll(script, r[0], r[1])
	}
	writeFile(t, filepath.Join(m.root, "danmaku-start"), script)
	var stub strings.Builder
	stub.WriteString("#!/bin/bash\n# Stand-in for the AWS CLI: aws secretsmanager get-secret-value --secret-id ARN ...\nset -euo pipefail\n")
	stub.WriteString("[[ $1 == secretsmanager && $2 == get-secret-value ]] || { echo \"aws stand-in: $*\" >&2; exit 1; }\n")
	stub.WriteString("id=\nwhile (($#)); do if [[ $1 == --secret-id ]]; then id=$2; fi; shift; done\ncase $id in\n")
	for arn, v := range d.secrets {
		fmt.Fprintf(&stub, "'%s') printf '%%s\\n' '%s' ;;\n", arn, v)
	}
	stub.WriteString("*) echo \"aws stand-in: no secret $id\" >&2; exit 254 ;;\nesac\n")
	writeFile(t, filepath.Join(m.root, "bin", "aws"), stub.String())
	if err := os.Chmod(filepath.Join(m.root, "bin", "aws"), 0o755); err != nil {
		t.Fatal(err)
	}

	// systemd's environment: the env file and the unit's HOME; PATH with
	// the AWS CLI stand-in first.
	environ := []string{"PATH=" + filepath.Join(m.root, "bin") + ":/usr/bin:/bin", "HOME=" + filepath.Join(m.root, "run", "danmaku")}
	for k, v := range parseEnvFile(t, role, env) {
		environ = append(environ, k+"="+v)
	}
	m.start = func() {
		m.cmd = exec.Command("bash", filepath.Join(m.root, "danmaku-start"))
		m.cmd.Env = environ
		m.cmd.Dir = m.root
		// Gone with the test, even one killed by its timeout.
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
		if err := m.cmd.Start(); err != nil {
			m.out.Write([]byte("start: " + err.Error() + "\n"))
			m.cmd = nil
			return
		}
		exited := make(chan struct{})
		go func() { _ = m.cmd.Wait(); m.out.Write([]byte("[exited]\n")); close(exited) }()
		t.Cleanup(func() {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = m.cmd.Process.Kill()
				<-exited
			}
			if t.Failed() {
				t.Logf("%s-%d output:\n%s", role, n, m.out.String())
			}
		})
		m.exited = exited
	}
	return m
}

// albAddr is where the ALB stand-in connects to the gslb from: the one
// address the gslb trusts.
const albAddr = "127.0.0.2"

// ready waits until the role says it serves.
func (m *machine) ready(t *testing.T) {
	t.Helper()
	if m.cmd == nil {
		t.Fatalf("%s did not start:\n%s", m.role, m.out.String())
	}
	if !m.out.waitFor(m.d.ctx, "press Ctrl-C to stop") {
		t.Fatalf("%s never served:\n%s", m.role, m.out.String())
	}
}

// stop sends SIGTERM, as systemd does, and waits for the role to exit.
func (m *machine) stop(t *testing.T) {
	t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-m.d.ctx.Done():
		t.Fatalf("%s did not stop:\n%s", m.role, m.out.String())
	}
}

// albStandIn starts the gslb's load balancer: a reverse proxy that connects
// from albAddr and appends the client's address to X-Forwarded-For, as an
// ALB does. It returns its URL.
func (d *deployment) albStandIn(t *testing.T, gslb string) string {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: gslb}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(albAddr)}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.SetXForwarded()
		},
		Transport: &http.Transport{DialContext: dialer.DialContext},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// client is one client machine: its requests come from its own address.
type client struct {
	hc     *http.Client
	dialer *websocket.Dialer
}

func (d *deployment) client(ip string) *client {
	nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	tc := d.clientTLS
	return &client{
		hc:     &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: nd.DialContext, TLSClientConfig: tc}},
		dialer: &websocket.Dialer{NetDialContext: nd.DialContext, TLSClientConfig: tc, HandshakeTimeout: 20 * time.Second},
	}
}

// entryAnswer is the gslb's answer to GET /v1/entry.
type entryAnswer struct {
	status int
	Ingest []string `json:"ingest"`
	Edge   []string `json:"edge"`
	Token  string   `json:"token"`
	errorBody
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Code, Message string `json:"-"`
}

func (a entryAnswer) String() string {
	if a.status == http.StatusOK {
		return fmt.Sprintf("200 edges %v ingests %v", a.Edge, a.Ingest)
	}
	return fmt.Sprintf("%d %s %s", a.status, a.Code, a.Message)
}

func (c *client) entry(ctx context.Context, base, ticket string) entryAnswer {
	return c.entryVia(ctx, base, ticket, "")
}

// entryVia asks base for an entry to room stage, with ticket (none: "")
// and an X-Forwarded-For header (none: "").
func (c *client) entryVia(ctx context.Context, base, ticket, forwarded string) entryAnswer {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/entry?room=stage", nil)
	if ticket != "" {
		req.Header.Set("Authorization", "Bearer "+ticket)
	}
	if forwarded != "" {
		req.Header.Set("X-Forwarded-For", forwarded)
	}
	var a entryAnswer
	a.status, a.errorBody = c.do(req, &a)
	return a
}

// do sends req and decodes a 200's body into ok, another's error.
func (c *client) do(req *http.Request, ok any) (int, errorBody) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, errorBody{Message: err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e errorBody
	if resp.StatusCode == http.StatusOK && ok != nil {
		_ = json.Unmarshal(body, ok)
	} else if json.Unmarshal(body, &e) == nil {
		e.Code, e.Message = e.Error.Code, e.Error.Message
	} else {
		e.Message = string(body)
	}
	return resp.StatusCode, e
}

// post sends a comment with token (none: "").
func (c *client) post(ctx context.Context, u, token, text string) (int, string, string) {
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	st, e := c.do(req, nil)
	return st, e.Code, e.Message
}

func (c *client) get(ctx context.Context, u string) (int, string, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	st, e := c.do(req, nil)
	return st, e.Code, e.Message
}

// ws opens a WebSocket with token and keeps it open, reading, until the
// test ends; it returns the handshake's status and error code.
func (c *client) ws(t *testing.T, ctx context.Context, u, token string) (int, string) {
	t.Helper()
	conn, resp, err := c.dialer.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp == nil {
			return 0, err.Error()
		}
		var e errorBody
		body, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(body, &e)
		return resp.StatusCode, e.Error.Code
	}
	go func() {
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = conn.Close() })
	return resp.StatusCode, ""
}

// findAudit waits for the audit record of text in bucket.
func findAudit(t *testing.T, ctx context.Context, c *s3.Client, bucket, text string) audit.Record {
	t.Helper()
	var found *audit.Record
	waitFor(t, ctx, "the audit record in s3://"+bucket, func() (bool, string) {
		list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("audit/")})
		if err != nil {
			return false, err.Error()
		}
		var keys []string
		for _, o := range list.Contents {
			keys = append(keys, aws.ToString(o.Key))
			obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				return false, err.Error()
			}
			b, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil {
				return false, err.Error()
			}
			_, recs, err := audit.Decode(b)
			if err != nil {
				t.Fatalf("audit object %s: %v", aws.ToString(o.Key), err)
			}
			for _, r := range recs {
				if r.Text == text {
					found = &r
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("objects %v", keys)
	})
	return *found
}

// waitFor checks cond until it holds, or fails t when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %s", what, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lineLog is a process's output, line by line.
type lineLog struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits for a line containing s; false when the process exited
// first or ctx ended.
func (l *lineLog) waitFor(ctx context.Context, s string) bool {
	for {
		sc := bufio.NewScanner(strings.NewReader(l.String()))
		for sc.Scan() {
			switch {
			case strings.Contains(sc.Text(), s):
				return true
			case sc.Text() == "[exited]":
				return false
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-l.changed:
		}
	}
}

// redisClient connects as cfg's user.
func redisClient(t *testing.T, ctx context.Context, cfg redisx.Config) redis.UniversalClient {
	t.Helper()
	c, err := redisx.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("redis as %s: %v", cfg.Username, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func freePort(t *testing.T) int {
	t.Helper()
	return testenv.FreePort(t)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
