package sdk

import (
	"context"
	"errors"
	"slices"
	"strings"
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
	w.startClient(c)
	posts := func() (n int) {
		w.lock(func() { n = len(w.posts) })
		return n
	}
	for i := range 5 {
		at := t0.Add(time.Duration(i) * defaultSendInterval)
		if i > 0 {
			w.clk.Set(at.Add(-time.Millisecond))
			time.Sleep(20 * time.Millisecond) // room to misbehave
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
