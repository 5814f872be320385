package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"danmaku/ingest"
	"danmaku/internal/ratelimit"
	"danmaku/internal/redisx"
	"danmaku/internal/rules"
	"danmaku/internal/testenv"
)

// TestFleetRules is issue 20's acceptance 4 on three ingest nodes sharing
// one real Redis, each a stack of its own with its own Redis clients: a
// version pushed through one node's rules API (what `danmaku words push`
// and `danmaku limits push` call) is in force on all three, waited for on
// each node's notification of a new list (no sleep); the time from the
// push to the third node is logged as median and p99 over the pushes (a
// figure, not an assertion: `go test -run TestFleetRules -v`). A bad
// document is refused whole with the field named and every node keeps the
// version in force; a rollback puts the previous version back on every
// node. The same for the rate-limit rules and the moderation settings.
func TestFleetRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three stacks on Redis")
	}
	pushes := 50
	addr := testenv.Redis(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const opKey = "rules-operator-key-0123456789abcdef"
	var nodes []*Stack
	for i := range 3 {
		b, closeBackends, err := OpenBackends(context.Background(), BackendConfig{Redis: redisx.Config{URL: addr}}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = closeBackends() })
		nodes = append(nodes, startStack(t, Config{
			Roles: []string{RoleIngest}, Backends: b, NodeID: fmt.Sprintf("ingest-%d", i),
			MasterKey: []byte("0123456789abcdef0123456789abcdef"), GiftKeys: []string{"g"}, OperatorKeys: []string{opKey},
			Logger: log, RateLimits: &ratelimit.Rules{},
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// call sends one rules API request to node 0 and returns the status
	// and the answer.
	call := func(method, path string, body []byte) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, nodes[0].URLs[RoleIngest]+"/v1/admin/rules/"+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+opKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	write := func(method, path string, body []byte) rules.Version {
		t.Helper()
		status, b := call(method, path, body)
		var v rules.Version
		if status != http.StatusOK || json.Unmarshal(b, &v) != nil || v.Version == 0 {
			t.Fatalf("%s %s: %d %s", method, path, status, b)
		}
		return v
	}
	refused := func(path string, body []byte, code, field string) {
		t.Helper()
		status, b := call(http.MethodPut, path, body)
		if status != http.StatusBadRequest || !strings.Contains(string(b), `"code":"`+code+`"`) || !strings.Contains(string(b), field) {
			t.Fatalf("bad document: %d %s; want 400 %s naming %s", status, b, code, field)
		}
	}
	// inForce waits until every node uses what done says, on each node's
	// own notification, and returns how long after start the last did.
	inForce := func(start time.Time, done func(n *Stack) (bool, <-chan struct{})) time.Duration {
		t.Helper()
		for i, n := range nodes {
			for {
				ok, changed := done(n)
				if ok {
					break
				}
				select {
				case <-changed:
				case <-ctx.Done():
					t.Fatalf("node %d never put the version in force", i)
				}
			}
		}
		return time.Since(start)
	}
	report := func(what string, lat []time.Duration) {
		slices.Sort(lat)
		t.Logf("%s: push → in force on all 3 nodes over %d pushes: median %v, p99 %v, max %v", what, len(lat),
			lat[len(lat)/2].Round(time.Millisecond), lat[(len(lat)*99+99)/100-1].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}

	t.Run("words", func(t *testing.T) {
		wordsAt := func(v int64) func(n *Stack) (bool, <-chan struct{}) {
			return func(n *Stack) (bool, <-chan struct{}) {
				got, changed := n.ingest.Words().Loaded()
				return got == strconv.FormatInt(v, 10), changed
			}
		}
		var lat []time.Duration
		var last rules.Version
		for i := range pushes {
			start := time.Now()
			last = write(http.MethodPut, "words?note=push+"+strconv.Itoa(i), fmt.Appendf(nil, "# list %d\nspoiler%d\n", i, i))
			lat = append(lat, inForce(start, wordsAt(last.Version)))
		}
		report("words", lat)
		masked := func(n *Stack, word string) bool {
			_, v := n.ingest.Words().Check("no "+word+" here", ingest.WordsMask)
			return v == ingest.WordsMasked
		}
		newest, previous := fmt.Sprint("spoiler", pushes-1), fmt.Sprint("spoiler", pushes-2)
		for i, n := range nodes {
			if !masked(n, newest) || masked(n, previous) {
				t.Fatalf("node %d: the newest list is not the one in force", i)
			}
		}
		// Not UTF-8 on line 3: refused whole, nothing moves.
		refused("words", []byte("fine\nalso fine\nbad \xff word\n"), ingest.CodeBadWords, "line 3")
		if h, _ := nodes[1].cfg.Backends.Shared.Rules.Head(ctx, rules.KindWords); h != last.Version {
			t.Fatalf("head %d after a refused list, want %d", h, last.Version)
		}
		for i, n := range nodes {
			if v, _ := n.ingest.Words().Loaded(); v != strconv.FormatInt(last.Version, 10) || !masked(n, newest) {
				t.Fatalf("node %d left version %d after a refused list (has %s)", i, last.Version, v)
			}
		}
		// Roll back: the previous list on every node.
		rb := write(http.MethodPost, "words/rollback?note=undo", nil)
		if rb.RollbackOf != last.Version-1 {
			t.Fatalf("rollback copied %d, want %d", rb.RollbackOf, last.Version-1)
		}
		inForce(time.Now(), wordsAt(rb.Version))
		for i, n := range nodes {
			if masked(n, newest) || !masked(n, previous) {
				t.Fatalf("node %d: the rollback did not restore the previous list", i)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		doc := func(i int) []byte {
			return mustJSON(t, ratelimit.Rules{Rules: []ratelimit.Rule{{Name: "entry-ip", Route: "GET /v1/entry", Key: ratelimit.KeyIP, Algorithm: ratelimit.AlgorithmLocal, Limit: int64(100 + i), Per: "1s"}}})
		}
		limitsAre := func(body []byte) func(n *Stack) (bool, <-chan struct{}) {
			return func(n *Stack) (bool, <-chan struct{}) {
				got, changed := n.limiter.Loaded()
				return bytes.Equal(got, body), changed
			}
		}
		var lat []time.Duration
		for i := range pushes {
			start := time.Now()
			write(http.MethodPut, "limits", doc(i))
			lat = append(lat, inForce(start, limitsAre(doc(i))))
		}
		report("limits", lat)
		refused("limits", []byte(`{"rules":[{"name":"x","route":"*","key":"ip","algorithm":"local","limit":5,"per":"1d"}]}`), ratelimit.CodeBadRules, "rules[0].per")
		for i, n := range nodes {
			if got, _ := n.limiter.Loaded(); !bytes.Equal(got, doc(pushes-1)) {
				t.Fatalf("node %d left the rules in force after a refused document: %s", i, got)
			}
		}
		write(http.MethodPost, "limits/rollback", nil)
		inForce(time.Now(), limitsAre(doc(pushes-2)))
		if r := nodes[2].limiter.Rules(); len(r.Rules) != 1 || r.Rules[0].Limit != int64(100+pushes-2) {
			t.Fatalf("node 2's rules after the rollback: %+v", r)
		}
	})

	t.Run("moderation", func(t *testing.T) {
		policies := []string{"mask", "reject", "refuse", "off"}
		doc := func(i int) []byte {
			return fmt.Appendf(nil, `{"word_policy":%q,"duplicate_window_ms":%d}`, policies[i%len(policies)], 1000+i)
		}
		modAt := func(v int64) func(n *Stack) (bool, <-chan struct{}) {
			return func(n *Stack) (bool, <-chan struct{}) {
				got, changed := n.ingest.Moderation().Loaded()
				return got == v, changed
			}
		}
		var lat []time.Duration
		var last rules.Version
		for i := range pushes {
			start := time.Now()
			last = write(http.MethodPut, "moderation", doc(i))
			lat = append(lat, inForce(start, modAt(last.Version)))
		}
		report("moderation", lat)
		want := ingest.Moderation{WordPolicy: ingest.WordsMask, DuplicateWindow: time.Duration(1000+pushes-1) * time.Millisecond}
		if p, err := ingest.ParseWordPolicy(policies[(pushes-1)%len(policies)]); err == nil {
			want.WordPolicy = p
		}
		for i, n := range nodes {
			if got := n.ingest.Moderation().Current(); got != want {
				t.Fatalf("node %d: %+v, want %+v", i, got, want)
			}
		}
		refused("moderation", []byte(`{"word_policy":"mask","duplicate_window_ms":0}`), ingest.CodeBadModeration, "duplicate_window_ms")
		for i, n := range nodes {
			if v, _ := n.ingest.Moderation().Loaded(); v != last.Version {
				t.Fatalf("node %d left version %d after a refused document (has %d)", i, last.Version, v)
			}
		}
		rb := write(http.MethodPost, "moderation/rollback", nil)
		inForce(time.Now(), modAt(rb.Version))
		if got := nodes[2].ingest.Moderation().Current().DuplicateWindow; got != time.Duration(1000+pushes-2)*time.Millisecond {
			t.Fatalf("node 2's duplicate window after the rollback: %v", got)
		}
	})
}

// The rules store is selected by a setting: -rules-dir keeps the versions
// in a directory (rules.ObjectStore), and a second process opening the same
// directory sees what the first pushed.
func TestRulesStoreSetting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() rules.Store {
		b, closeBackends, err := OpenBackends(ctx, BackendConfig{RulesDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = closeBackends() })
		if _, ok := b.Shared.Rules.(*rules.ObjectStore); !ok {
			t.Fatalf("rules store %T, want *rules.ObjectStore", b.Shared.Rules)
		}
		return b.Shared.Rules
	}
	if _, err := open().Push(ctx, rules.KindModeration, []byte(`{"word_policy":"off","duplicate_window_ms":1000}`), rules.Meta{By: "t"}); err != nil {
		t.Fatal(err)
	}
	if d, err := open().Get(ctx, rules.KindModeration, 0); err != nil || d.Version.Version != 1 || !strings.Contains(string(d.Body), "off") {
		t.Fatalf("the second process read %+v %q, %v", d.Version, d.Body, err)
	}
}
