package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"danmaku/internal/ratelimit"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testenv"
	"danmaku/internal/testwait"
)

// TestRuleChangeReachesEveryNode is acceptance 2 of the limiter: two
// nodes (limiters with their own Redis clients) share one Redis for their
// windows and their rules; an operator changes a rule there, and each node
// enforces it after its next poll, exactly across both. The delay is
// logged (docs/api-limits.md); it is bounded by Poll plus a GET.
//
// The nodes' WindowTimeout is far above the default 100 ms: this test is
// about one window shared by both nodes, and on a loaded machine a window
// call that merely looks slow would put a node on its local share (with
// the fake clock, for good), which admits carol again on the other node.
// The fallback has its own tests (limiter_test.go).
func TestRuleChangeReachesEveryNode(t *testing.T) {
	addr := testenv.Redis(t)
	client := func() *ratelimit.RedisSource {
		return ratelimit.NewRedisSource(redistest.Dial(t, redisx.Config{URL: addr}))
	}
	const poll = 250 * time.Millisecond
	ops := client()
	ctx := context.Background()
	if err := ops.Put(ctx, []byte(`{"rules":[{"name":"user","route":"GET /v1/entry","key":"user","algorithm":"window","limit":100,"per":"1m"}]}`)); err != nil {
		t.Fatal(err)
	}
	nodes := make([]*server, 2)
	for i := range nodes {
		rdb := redistest.Dial(t, redisx.Config{URL: addr})
		nodes[i] = newServer(t, ratelimit.Config{Source: ratelimit.NewRedisSource(rdb), Window: ratelimit.NewRedisWindow(rdb), Poll: poll, WindowTimeout: 10 * time.Second})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = nodes[i].lim.Run(rctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	// Each node polls on its fake clock: waitPolls moves both by a poll
	// while it waits, so a node's next read never waits for real time.
	waitPolls := func(cond func() bool) {
		t.Helper()
		waitFor(t, func() bool {
			if cond() {
				return true
			}
			for _, n := range nodes {
				n.clk.Advance(poll)
			}
			return false
		})
	}
	// Both nodes have read the first document.
	waitPolls(func() bool { return len(nodes[0].lim.Rules().Rules) == 1 && len(nodes[1].lim.Rules().Rules) == 1 })

	user := func(n *server, u string) int {
		return n.do("GET", "/v1/entry", "198.51.100.1", "X-Verified-User", u).code
	}
	changed := nodes[0].clk.Now()
	if err := ops.Put(ctx, []byte(`{"rules":[{"name":"user","route":"GET /v1/entry","key":"user","algorithm":"window","limit":1,"per":"1m"}]}`)); err != nil {
		t.Fatal(err)
	}
	// A node enforces the new rule when a fresh user's second entry is
	// refused there.
	for i, n := range nodes {
		probe := 0
		waitPolls(func() bool {
			probe++
			u := fmt.Sprintf("probe-%d-%d", i, probe)
			user(n, u)
			return user(n, u) == 429
		})
		t.Logf("node %d enforces the changed rule %v after the change (fake clock)", i, nodes[i].clk.Now().Sub(changed))
	}
	// The window is one across the nodes.
	if c := user(nodes[0], "carol"); c != 200 {
		t.Fatalf("carol's first entry: %d", c)
	}
	if c := user(nodes[1], "carol"); c != 429 {
		t.Fatalf("carol's second entry, on the other node: %d, want 429", c)
	}
	// A document that does not parse, set behind the nodes' backs, changes
	// nothing: once each node has read and refused it (a reload counted
	// with no document changed can only be that), the rule holds.
	before := make([]float64, len(nodes))
	for i, n := range nodes {
		before[i] = sum(t, n.reg, "danmaku_ratelimit_reloads_total")
	}
	if err := redistest.Dial(t, redisx.Config{URL: addr}).Set(ctx, ratelimit.RulesKey, `{"rules":[{"name":"user"}]}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		waitPolls(func() bool { return sum(t, n.reg, "danmaku_ratelimit_reloads_total") > before[i] })
	}
	if c := user(nodes[1], "dave"); c != 200 {
		t.Fatal(c)
	}
	if c := user(nodes[0], "dave"); c != 429 {
		t.Fatalf("a broken document dropped the rule: %d", c)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.For(t, "the condition", cond)
}
