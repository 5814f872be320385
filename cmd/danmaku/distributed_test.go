package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testenv"
	"danmaku/sdk"
)

// TestDistributedPipeline runs every role as its own process on the real
// backends — Redis, versitygw, and Varnish as the CDN the viewers poll — and
// checks that a viewer gets a comment (through the CDN) and a gift (through
// the edge, then de-duplicated against its segment) exactly once: once on
// one Redis server, once on a Redis Cluster (three masters, three
// replicas), whose seeds every role gets as DANMAKU_REDIS, a comma list.
// Each role runs as its own Redis ACL user, created as an operator does
// (`danmaku redis-acl`), and the servers refuse none of their commands.
func TestDistributedPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes against real servers")
	}
	for _, d := range []struct {
		name  string
		redis func(t *testing.T) (string, []redisAdmin) // DANMAKU_REDIS, and every server
	}{
		{"redis", func(t *testing.T) (string, []redisAdmin) {
			addr := testenv.Redis(t)
			admin := redistest.Dial(t, redisx.Config{URL: addr})
			return addr, []redisAdmin{func(args ...string) (any, error) {
				a := make([]any, len(args))
				for i, s := range args {
					a[i] = s
				}
				return admin.Do(context.Background(), a...).Result()
			}}
		}},
		{"redis-cluster", func(t *testing.T) (string, []redisAdmin) {
			c := testenv.RedisCluster(t)
			var nodes []redisAdmin
			for _, n := range c.Nodes() {
				nodes = append(nodes, n.Do)
			}
			return c.URL(), nodes
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			testDistributedPipeline(t, d.redis)
		})
	}
}

// redisAdmin sends one command to one Redis server as its default user.
type redisAdmin func(args ...string) (any, error)

// redisUsers creates the roles' ACL users on every server from `danmaku
// redis-acl`'s output, and returns each role's DANMAKU_REDIS_USER and
// DANMAKU_REDIS_PASSWORD.
func redisUsers(t *testing.T, ctx context.Context, bin string, servers []redisAdmin) map[string][]string {
	t.Helper()
	env := os.Environ()
	users := map[string][]string{}
	for _, r := range redisx.ACLRoles() {
		pw := "distributed-test-" + r
		env = append(env, redisACLPasswordEnv(r)+"="+pw)
		users[r] = []string{"DANMAKU_REDIS_USER=" + redisx.ACLUser(r), "DANMAKU_REDIS_PASSWORD=" + pw}
	}
	cmd := exec.CommandContext(ctx, bin, "redis-acl")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("redis-acl: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, do := range servers {
			if _, err := do(strings.Fields(line)...); err != nil {
				t.Fatalf("%.40s...: %v", line, err)
			}
		}
	}
	return users
}

func testDistributedPipeline(t *testing.T, startRedis func(t *testing.T) (string, []redisAdmin)) {
	redisAddr, redisServers := startRedis(t)
	bin := binary(t)
	env := testenv.S3(t)
	cdn := testenv.Varnish(t, env.BucketURL()) + "/dist/"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	ports := freePorts(t, 7)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	base := append(os.Environ(),
		"DANMAKU_REDIS="+redisAddr,
		"DANMAKU_S3_BUCKET="+env.Bucket, "DANMAKU_S3_ENDPOINT="+env.Endpoint, "DANMAKU_S3_REGION="+env.Region,
		"DANMAKU_S3_PATH_STYLE=true", "DANMAKU_S3_PREFIX=dist/",
		"DANMAKU_S3_ACCESS_KEY="+env.AccessKey, "DANMAKU_S3_SECRET_KEY="+env.SecretKey,
		"DANMAKU_GIFT_KEYS=svc-key", "DANMAKU_OPERATOR_KEYS=op-key",
		"DANMAKU_TICKET_KEY=distributed-test-ticket-key-0123456789",
		"DANMAKU_AUDIT_DIR="+diskDir(t),
	)
	start := func(extraEnv []string, args ...string) *lines {
		return startRole(t, ctx, bin, append(append([]string(nil), base...), extraEnv...), args...)
	}
	master := "DANMAKU_MASTER_KEY=" + hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	users := redisUsers(t, ctx, bin, redisServers)
	start(append([]string{master}, users["gslb"]...), "gslb", "-gslb", addr(0), "-cdn", cdn)
	start(users["ingest"], "ingest", "-ingest", addr(1), "-metrics-addr", addr(5))
	start(users["edge"], "edge", "-edge", addr(2), "-metrics-addr", addr(6))
	start(users["slicer"], "slicer", "-slicer", addr(3), "-node-id", "slicer-1")
	// Only rooms of a live event exist: provision one as an operator does.
	eventCLI(t, ctx, bin, base, "create", "-gslb", "http://"+addr(0), "-f", eventFile(t, "dist", "dist"))

	ticket, err := auth.MintTicket([]byte("distributed-test-ticket-key-0123456789"), "viewer", auth.Ticket{Nick: "viewer"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sdk.New(sdk.Config{EntryURL: "http://" + addr(0), Room: "dist", Ticket: ticket, FirstJoinJitter: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	for c.Stats().EdgeConnects == 0 {
		select {
		case err := <-runDone:
			t.Fatalf("client stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("client never connected to the edge")
		case <-time.After(50 * time.Millisecond):
		}
	}
	alice, err := auth.MintTicket([]byte("distributed-test-ticket-key-0123456789"), "alice", auth.Ticket{Nick: "alice"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, bin, "send", "-entry", "http://"+addr(0), "-room", "dist", "-ticket", alice, "over the CDN").CombinedOutput(); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx, bin, "gift", "-ingest", "http://"+addr(1), "-key", "svc-key", "-room", "dist", "-user", "bob", "-gift", "rocket", "-value", "5000", "-order", "dist-1").CombinedOutput(); err != nil {
		t.Fatalf("gift: %v\n%s", err, out)
	}
	got := map[string]int{}
	deadline := time.After(30 * time.Second)
	for got["barrage"] == 0 || got["gift"] == 0 {
		select {
		case m := <-c.Messages():
			got[m.Kind.String()]++
			if m.Kind == sdk.KindBarrage && m.Text != "over the CDN" || m.Kind == sdk.KindGift && m.Gift != "rocket" {
				t.Fatalf("unexpected message %+v", m)
			}
		case <-deadline:
			t.Fatalf("got %v; stats %+v", got, c.Stats())
		}
	}
	// The gift's segment arrives after the edge push: it must be skipped.
	for c.Stats().Duplicates == 0 {
		select {
		case m := <-c.Messages():
			t.Fatalf("unexpected extra message %+v", m)
		case <-deadline:
			t.Fatalf("the gift's segment never came; stats %+v", c.Stats())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.HasPrefix(c.Entry().CDN, cdn) {
		t.Fatalf("entry CDN %q, want %q", c.Entry().CDN, cdn)
	}
	cancel()
	<-runDone
	for i, do := range redisServers {
		log, err := do("ACL", "LOG")
		if err != nil {
			t.Fatal(err)
		}
		if entries, _ := log.([]any); len(entries) > 0 {
			t.Errorf("server %d refused the roles %d times: %v", i, len(entries), entries)
		}
	}
}
