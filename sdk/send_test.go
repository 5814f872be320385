package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The queue's rules on their own, with explicit times.
func TestSendQueueRules(t *testing.T) {
	t0 := start
	q := newSendQueue(5, 1200*time.Millisecond, 10*time.Second)

	if r := q.push("a", t0); r != (pushResult{}) {
		t.Errorf("first push = %+v, want posted at once", r)
	}
	if text, _, ok := q.next(t0); !ok || text != "a" {
		t.Fatalf("next = %q %v", text, ok)
	}
	// The interval holds the next one back until t0+1.2s.
	if r := q.push("b", t0.Add(100*time.Millisecond)); !r.heldBack || r.dropped || r.deduped {
		t.Errorf("push within the interval = %+v, want held back", r)
	}
	if text, until, ok := q.next(t0.Add(time.Second)); !ok || text != "" || !until.Equal(t0.Add(1200*time.Millisecond)) {
		t.Errorf("next within the interval = %q %v %v, want a wait until t0+1.2s", text, until, ok)
	}
	if text, _, _ := q.next(t0.Add(1200 * time.Millisecond)); text != "b" {
		t.Errorf("next after the interval = %q, want b", text)
	}
	// The same text within 10 s succeeds without being queued.
	if r := q.push("a", t0.Add(9999*time.Millisecond)); !r.deduped {
		t.Errorf("same text within 10s = %+v, want deduped", r)
	}
	if r := q.push("a", t0.Add(10*time.Second)); r.deduped {
		t.Errorf("same text after 10s = %+v, want queued", r)
	}
	// A full queue drops its oldest.
	for _, s := range []string{"c", "d", "e", "f"} {
		if r := q.push(s, t0.Add(10*time.Second)); r.dropped {
			t.Errorf("push %q dropped with room left", s)
		}
	}
	if r := q.push("g", t0.Add(10*time.Second)); !r.dropped {
		t.Errorf("sixth push = %+v, want the oldest dropped", r)
	}
	var got []string
	now := t0.Add(20 * time.Second)
	for {
		text, until, ok := q.next(now)
		if !ok {
			break
		}
		if text == "" {
			now = until
			continue
		}
		got = append(got, text)
	}
	if want := []string{"c", "d", "e", "f", "g"}; !slices.Equal(got, want) {
		t.Errorf("drained %v, want %v", got, want)
	}
}

// Through a running client, with the fake clock stepped by hand so that the
// ingest records exact times: one post per 1.2 s, never earlier; the queue
// keeps the newest five; repeats within 10 s are not posted.
func TestSendThrottle(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.buildClient(func(cfg *Config) { cfg.NoEdge = true })
	ctx := context.Background()
	// Queued before Run: the first two are dropped for the five after them.
	for i := 1; i <= 7; i++ {
		if err := c.Send(ctx, "m"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.SendsDropped != 2 || st.SendsHeldBack != 6 {
		t.Errorf("SendsDropped = %d, SendsHeldBack = %d; want 2 and 6", st.SendsDropped, st.SendsHeldBack)
	}
	t0 := w.clk.Now()
	w.clk.Watch(".(*Client).sendLoop")
	w.startClient(c)
	posts := func() (n int) {
		w.lock(func() { n = len(w.posts) })
		return n
	}
	for i := range 5 {
		at := t0.Add(time.Duration(i) * defaultSendInterval)
		if i > 0 {
			w.clk.Set(at.Add(-time.Millisecond))
			// Two reads by the send loop of the time 1 ms early: it has
			// acted on the first (a post it made is recorded by then,
			// the ingest answering before the loop reads again).
			eventually(t, "the send loop reading the clock twice", func() bool { return w.clk.Reads() >= 2 })
			if n := posts(); n != i {
				t.Fatalf("%d posts 1 ms before post %d was allowed", n, i+1)
			}
			w.clk.Set(at)
		}
		eventually(t, "the next post", func() bool { return posts() == i+1 })
		w.lock(func() {
			p := w.posts[i]
			if want := "m" + string(rune('3'+i)); p.text != want || !p.at.Equal(at) {
				t.Errorf("post %d = %q at t0+%v, want %q at t0+%v", i, p.text, p.at.Sub(t0), want, at.Sub(t0))
			}
			if p.path != "/v1/rooms/r1/barrage" || p.token != "tok-1" {
				t.Errorf("post %d = %+v", i, p)
			}
		})
	}

	eventually(t, "the fifth answer", func() bool { return c.Stats().SendsPosted == 5 })
	// Within 10 s of being queued, m7 again (even re-spaced) is answered
	// with success and not sent.
	for _, s := range []string{"m7", "  m7 "} {
		if err := c.Send(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.SendsDeduped != 2 || st.SendsPosted != 5 {
		t.Errorf("SendsDeduped = %d, SendsPosted = %d; want 2 and 5", st.SendsDeduped, st.SendsPosted)
	}
	w.clk.Set(t0.Add(10 * time.Second))
	if err := c.Send(ctx, "m7"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sixth post", func() bool { return c.Stats().SendsPosted == 6 })
	if st := c.Stats(); st.SendsDeduped != 2 || posts() != 6 {
		t.Errorf("SendsDeduped = %d, %d posts; want 2 and 6", st.SendsDeduped, posts())
	}
}

func TestSendRejectsText(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	ctx := context.Background()
	for _, tc := range []struct {
		text string
		want error
	}{
		{"", ErrEmptyText},
		{" \t\n ", ErrEmptyText},
		{strings.Repeat("x", 61), ErrTextTooLong},
		{strings.Repeat("弹", 60), nil},
		{"a  b", nil},
	} {
		if err := c.Send(ctx, tc.text); !errors.Is(err, tc.want) {
			t.Errorf("Send(%q) = %v, want %v", tc.text, err, tc.want)
		}
	}
}

// The ingest refusing the token makes the client re-join once and retry
// with the new token.
func TestSendRejoinsOn401(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.ingestAnswer = func(p post) (int, string) {
		if p.token == "tok-1" {
			return 401, `{"error":{"code":"bad_token","message":"expired"}}`
		}
		return 0, ""
	}
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	if err := c.Send(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the post", func() bool { return c.Stats().SendsPosted == 1 })
	if got := c.Entry().Token; got != "tok-2" {
		t.Errorf("token after re-join = %q, want tok-2", got)
	}
}

// TestSendWrongNodeTriesNext: an ingest that refuses the token as not its
// own (403 wrong_node) is skipped for the next address the entry named.
func TestSendWrongNodeTriesNext(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.ingestTwice = true
	first := true
	w.ingestAnswer = func(post) (int, string) {
		if first {
			first = false
			return 403, `{"error":{"code":"wrong_node","message":"not this node's token"}}`
		}
		return 0, ""
	}
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	if err := c.Send(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the post", func() bool { return c.Stats().SendsPosted == 1 })
	w.lock(func() {
		if len(w.posts) != 2 {
			t.Errorf("%d posts, want the refused one and the fallback", len(w.posts))
		}
	})
}

func TestAnnounce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.role = "host"
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	for range 2 { // not throttled: both go at once
		id, err := c.Announce(context.Background(), "  doors   open ")
		if err != nil {
			t.Fatal(err)
		}
		if id != "1700-7" {
			t.Errorf("id = %q", id)
		}
	}
	w.lock(func() {
		if len(w.posts) != 2 || w.posts[0].path != "/v1/rooms/r1/announce" || w.posts[0].text != "doors open" || !w.posts[1].at.Equal(w.posts[0].at) {
			t.Errorf("posts = %+v", w.posts)
		}
	})

	w.lock(func() {
		w.ingestAnswer = func(post) (int, string) {
			return 403, `{"error":{"code":"forbidden","message":"hosts only"}}`
		}
	})
	_, err := c.Announce(context.Background(), "x")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 403 || ae.Code != "forbidden" {
		t.Errorf("Announce with a 403 = %v", err)
	}
}

// A text dropped from the full queue was never sent: typing it again sends it.
func TestDroppedTextIsNotDeduped(t *testing.T) {
	q := newSendQueue(2, time.Hour, 10*time.Second)
	now := time.Unix(100, 0)
	q.push("a", now)
	q.push("b", now)
	if r := q.push("c", now); !r.dropped { // "a" is dropped
		t.Fatal("expected a drop")
	}
	if r := q.push("a", now); r.deduped {
		t.Fatal(`"a" was dropped unsent, yet answered as a duplicate`)
	}
}

// ingestNodes are ingest servers of their own that the entry names in
// order, the user's own node first; each answers through answer(node, n),
// n counting that node's posts from 0 (status 0: {"ok":true}).
type ingestNodes struct {
	mu   sync.Mutex
	hits []int       // node of each post, in order
	at   []time.Time // client-local fake time of each post
}

type nodeAnswer struct {
	status     int
	code       string
	retryAfter string
}

func newIngestNodes(t *testing.T, w *world, n int, answer func(node, n int) nodeAnswer) *ingestNodes {
	t.Helper()
	in := &ingestNodes{}
	var urls []string
	counts := make([]int, n)
	for node := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			in.mu.Lock()
			k := counts[node]
			counts[node]++
			in.hits = append(in.hits, node)
			in.at = append(in.at, w.clk.Now())
			in.mu.Unlock()
			a := answer(node, k)
			if a.status == 0 {
				_, _ = io.WriteString(rw, `{"ok":true}`)
				return
			}
			if a.retryAfter != "" {
				rw.Header().Set("Retry-After", a.retryAfter)
			}
			rw.WriteHeader(a.status)
			_, _ = io.WriteString(rw, `{"error":{"code":"`+a.code+`","message":"test"}}`)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	w.lock(func() {
		w.entryAnswer = func(n int) (int, http.Header, string) {
			now := w.serverNow()
			b, _ := json.Marshal(map[string]any{
				"room": testRoom, "user": "alice", "role": "viewer",
				"ingest": urls, "cdn": w.cdn.URL, "token": "tok-" + strconv.Itoa(n+1),
				"token_expires_ms": now.Add(w.tokenTTL).UnixMilli(), "server_time_ms": now.UnixMilli(),
				"segment_ms": 1000, "publish_delay_ms": testDelay,
			})
			return http.StatusOK, nil, string(b)
		}
	})
	return in
}

func (in *ingestNodes) posts() (hits []int, at []time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.hits), slices.Clone(in.at)
}

var (
	notPrimary  = nodeAnswer{421, "not_primary", "1"}
	unavailable = nodeAnswer{503, "backend_unavailable", ""}
)

// A fallback that answers 421 not_primary sends the client back to the
// first ingest address (the user's own node) after its Retry-After.
func TestSendNotPrimaryGoesBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		retryAfter string
		wait       time.Duration
	}{
		{"retry after 1 s", "1", time.Second},
		{"retry after 2 s", "2", 2 * time.Second},
		{"no retry-after", "", defaultNotPrimaryWait},
		{"retry-after capped", "3600", maxNotPrimaryWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			in := newIngestNodes(t, w, 3, func(node, n int) nodeAnswer {
				switch {
				case node == 0 && n == 0:
					return unavailable // a passing failure of the primary
				case node == 1:
					return nodeAnswer{421, "not_primary", tc.retryAfter}
				}
				return nodeAnswer{}
			})
			c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
			w.run()
			if err := c.Send(context.Background(), "hello"); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the post", func() bool { return c.Stats().SendsPosted == 1 })
			hits, at := in.posts()
			if !slices.Equal(hits, []int{0, 1, 0}) {
				t.Fatalf("posts went to nodes %v, want primary, fallback, primary", hits)
			}
			if d := at[2].Sub(at[1]); d < tc.wait {
				t.Errorf("back to the primary %v after the 421, want at least %v", d, tc.wait)
			}
			if st := c.Stats(); st.SendsFailed != 0 {
				t.Errorf("SendsFailed = %d", st.SendsFailed)
			}
		})
	}
}

// Going back is bounded: a primary that keeps failing for this client while
// its fallback keeps saying not_primary costs one comment, not the send loop.
func TestSendNotPrimaryBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := newIngestNodes(t, w, 2, func(node, n int) nodeAnswer {
		if node == 0 {
			return unavailable
		}
		return notPrimary
	})
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()
	if err := c.Send(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failure", func() bool { return c.Stats().SendsFailed == 1 })
	hits, _ := in.posts()
	want := slices.Repeat([]int{0, 1}, maxNotPrimary+1)
	if !slices.Equal(hits, want) {
		t.Fatalf("posts went to nodes %v, want %v", hits, want)
	}
	// The next comment starts over at the primary, which is back.
	if err := c.Send(context.Background(), "again"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second comment", func() bool {
		hits, _ := in.posts()
		return len(hits) > len(want)
	})
	if hits, _ := in.posts(); hits[len(want)] != 0 {
		t.Fatalf("the next comment went to node %d first", hits[len(want)])
	}
}

// The failover that was there before stays: a network or server error at
// one address tries the next at once; not_primary from the first address
// itself (it cannot be the user's node and not) moves on too; any other
// refusal is final.
func TestSendFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(node, n int) nodeAnswer
		hits   []int
		posted bool
	}{
		{"server error, next address", func(node, n int) nodeAnswer {
			if node == 0 {
				return unavailable
			}
			return nodeAnswer{}
		}, []int{0, 1}, true},
		{"two failing, the third takes it", func(node, n int) nodeAnswer {
			if node < 2 {
				return unavailable
			}
			return nodeAnswer{}
		}, []int{0, 1, 2}, true},
		{"not_primary from the first address", func(node, n int) nodeAnswer {
			if node == 0 {
				return notPrimary
			}
			return nodeAnswer{}
		}, []int{0, 1}, true},
		{"other refusal is final", func(node, n int) nodeAnswer {
			return nodeAnswer{400, "text_too_long", ""}
		}, []int{0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			in := newIngestNodes(t, w, 3, tc.answer)
			c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
			if err := c.Send(context.Background(), "hello"); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the answer", func() bool { st := c.Stats(); return st.SendsPosted+st.SendsFailed == 1 })
			hits, at := in.posts()
			if !slices.Equal(hits, tc.hits) {
				t.Fatalf("posts went to nodes %v, want %v", hits, tc.hits)
			}
			if !at[len(at)-1].Equal(at[0]) {
				t.Errorf("failover waited %v", at[len(at)-1].Sub(at[0]))
			}
			if st := c.Stats(); (st.SendsPosted == 1) != tc.posted {
				t.Errorf("stats %+v, posted want %v", st, tc.posted)
			}
		})
	}
}
