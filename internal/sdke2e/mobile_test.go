package sdke2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
	"danmaku/sdk"
	"danmaku/sdk/mobile"
)

// recorder is a Listener that keeps everything and checks the callback
// guarantees: never two at once, StateLive before any message, nothing
// after StateStopped.
type recorder struct {
	t       *testing.T
	inside  atomic.Int32
	mu      sync.Mutex
	states  []int
	msgs    []*mobile.Message
	errs    []string // "code|message"
	onState func(state int)
}

func (r *recorder) enter() func() {
	if r.inside.Add(1) != 1 {
		r.t.Errorf("listener called while another callback runs")
	}
	return func() { r.inside.Add(-1) }
}

func (r *recorder) after(what string) {
	if slices.Contains(r.states, mobile.StateStopped) {
		r.t.Errorf("%s after StateStopped", what)
	}
}

func (r *recorder) OnState(state int) {
	defer r.enter()()
	r.mu.Lock()
	r.after(fmt.Sprintf("OnState(%d)", state))
	r.states = append(r.states, state)
	f := r.onState
	r.mu.Unlock()
	if f != nil {
		f(state)
	}
}

func (r *recorder) OnMessage(m *mobile.Message) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after("OnMessage")
	if !slices.Contains(r.states, mobile.StateLive) {
		r.t.Errorf("OnMessage before StateLive")
	}
	r.msgs = append(r.msgs, m)
}

func (r *recorder) OnError(code, message string) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after("OnError")
	r.errs = append(r.errs, code+"|"+message)
}

func (r *recorder) snapshot() (states []int, msgs []*mobile.Message, errs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states), slices.Clone(r.msgs), slices.Clone(r.errs)
}

func (r *recorder) stopped() bool {
	s, _, _ := r.snapshot()
	return slices.Contains(s, mobile.StateStopped)
}

// count returns how many of msgs match.
func count(msgs []*mobile.Message, match func(*mobile.Message) bool) int {
	n := 0
	for _, m := range msgs {
		if match(m) {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for: %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func startStack(t *testing.T) *stack.Stack {
	return stacktest.Start(t, stack.Config{Events: []event.Event{stacktest.LiveEvent("mobile", "mobile-e2e", "viewers", "stopper")}})
}

func ticket(t *testing.T, user, role string) string { return stacktest.Ticket(t, user, role) }

// noJitterMs is the FirstJoinJitterMs that means "join at once": negative
// where danmaku/sdk takes a negative FirstJoinJitter as none (its zero then
// being a default wait), zero where it refuses negative values.
func noJitterMs(t *testing.T) int64 {
	t.Helper()
	_, err := sdk.New(sdk.Config{EntryURL: "http://127.0.0.1:1", Room: "probe", Ticket: "t", FirstJoinJitter: -time.Millisecond})
	if errors.Is(err, sdk.ErrConfig) {
		return 0
	}
	return -1
}

func postGift(t *testing.T, ingest string, gift map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(gift)
	req, _ := http.NewRequest(http.MethodPost, ingest+"/v1/gifts", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+stack.DevServiceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		OK bool   `json:"ok"`
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.ID == "" {
		t.Fatalf("POST gift: %d %+v %v", resp.StatusCode, out, err)
	}
	return out.ID
}

// TestEndToEnd drives the facade as an app would, against every role of the
// pipeline in this process: a host joins, sends a comment, announces, and a
// business server sends a gift; each comes back once through the listener
// and once through Next; hiding counts arrivals; Stop ends it. It waits on
// conditions only; the deadline guards against hanging.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test runs a few seconds of real segments")
	}
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const room = "mobile-e2e"

	rec := &recorder{t: t}
	c, err := mobile.NewClient(&mobile.Config{
		EntryURL:          st.URLs[stack.RoleGSLB],
		Room:              room,
		Ticket:            stacktest.Ticket(t, "host1", auth.RoleHost, room),
		FirstJoinJitterMs: noJitterMs(t),
		// Nothing leaves the screen during the test, whatever its pace.
		RenderDisplayMs: time.Hour.Milliseconds(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Next(); m != nil {
		t.Fatalf("Next before Start = %+v", m)
	}
	if err := c.Start(rec); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(rec); mobile.ErrorCode(err) != mobile.ErrCodeAlreadyStarted {
		t.Fatalf("second Start: %v (code %q)", err, mobile.ErrorCode(err))
	}
	waitFor(t, ctx, "StateLive", func() bool { s, _, _ := rec.snapshot(); return slices.Contains(s, mobile.StateLive) })
	if r := c.Role(); r != auth.RoleHost {
		t.Fatalf("Role = %q", r)
	}
	// The gift and the announcement should reach it through the edge first;
	// their segment copies are then the duplicates counted below.
	waitFor(t, ctx, "edge connection", func() bool { return c.Stats().EdgeConnects > 0 })

	const comment = "hello from the phone"
	if err := c.Send(comment); err != nil {
		t.Fatal(err)
	}
	if err := c.Send("   "); mobile.ErrorCode(err) != mobile.ErrCodeEmptyText {
		t.Fatalf("Send(blank): %v (code %q)", err, mobile.ErrorCode(err))
	}
	if err := c.Send(strings.Repeat("x", 61)); mobile.ErrorCode(err) != mobile.ErrCodeTextTooLong {
		t.Fatalf("Send(61 characters): %v (code %q)", err, mobile.ErrorCode(err))
	}
	if err := c.Announce("welcome"); err != nil {
		t.Fatal(err)
	}
	giftID := postGift(t, st.URLs[stack.RoleIngest], map[string]any{
		"order_id": "mobile-order-1", "room": room, "user": "fan1", "nick": "Fan",
		"avatar": "a7", "gift": "rocket", "value": 5000, "count": 1,
	})

	isComment := func(text string) func(*mobile.Message) bool {
		return func(m *mobile.Message) bool {
			return m.Kind == mobile.KindBarrage && m.Text == text && m.User == "host1"
		}
	}
	isGift := func(m *mobile.Message) bool { return m.Kind == mobile.KindGift && m.ID == giftID }
	isAnnounce := func(m *mobile.Message) bool {
		return m.Kind == mobile.KindSystem && m.Text == "welcome" && m.Role == auth.RoleHost
	}

	// The UI's frame loop.
	var shown []*mobile.Message
	frame := func() {
		for m := c.Next(); m != nil; m = c.Next() {
			shown = append(shown, m)
		}
	}
	all := func(msgs []*mobile.Message) bool {
		return count(msgs, isComment(comment)) > 0 && count(msgs, isGift) > 0 && count(msgs, isAnnounce) > 0
	}
	waitFor(t, ctx, "comment, announcement and gift through the listener and Next", func() bool {
		frame()
		_, msgs, _ := rec.snapshot()
		return all(msgs) && all(shown)
	})
	// Both copies of the gift and of the announcement (edge and segment)
	// have arrived once two duplicates were skipped; only then does
	// "exactly once" mean anything.
	waitFor(t, ctx, "segment copies of the gift and the announcement", func() bool { return c.Stats().Duplicates >= 2 })
	frame()
	_, msgs, _ := rec.snapshot()
	for name, match := range map[string]func(*mobile.Message) bool{"comment": isComment(comment), "gift": isGift, "announcement": isAnnounce} {
		if n := count(msgs, match); n != 1 {
			t.Errorf("listener got the %s %d times", name, n)
		}
		if n := count(shown, match); n != 1 {
			t.Errorf("Next showed the %s %d times", name, n)
		}
	}
	for _, m := range msgs {
		if isGift(m) && (m.Nick != "Fan" || m.User != "fan1" || m.Gift != "rocket" || m.Value != 5000 || m.Count != 1 || m.Avatar != "a7") {
			t.Errorf("gift = %+v", m)
		}
	}
	if got := c.OnScreen(); got != int64(len(shown)) {
		t.Errorf("OnScreen = %d, want %d", got, len(shown))
	}

	// The app goes to the background.
	c.SetHidden(true)
	if !c.Hidden() || c.NewCount() != 0 || c.OnScreen() != 0 {
		t.Fatalf("hidden: Hidden %v, NewCount %d, OnScreen %d", c.Hidden(), c.NewCount(), c.OnScreen())
	}
	const later = "sent while the app was hidden"
	if err := c.Send(later); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "NewCount while hidden", func() bool { return c.NewCount() > 0 })
	if n := c.NewCount(); n != 1 {
		t.Errorf("NewCount = %d, want 1", n)
	}
	if m := c.Next(); m != nil {
		t.Fatalf("Next while hidden = %+v", m)
	}
	if w := c.Waiting(); w != 1 {
		t.Errorf("Waiting = %d, want 1", w)
	}
	c.SetHidden(false)
	if c.Hidden() || c.NewCount() != 0 {
		t.Fatalf("shown again: Hidden %v, NewCount %d", c.Hidden(), c.NewCount())
	}
	if m := c.Next(); m == nil || !isComment(later)(m) {
		t.Fatalf("Next after showing = %+v", m)
	}

	s := c.Stats()
	if s.Delivered != 4 || s.Duplicates != 2 || s.SendsPosted != 2 || s.RenderPushed != 4 || s.RenderShown != 4 ||
		s.RenderWaiting != 0 || s.DecodeErrors != 0 || s.SeqGaps != 0 || s.EntryFetches < 1 {
		t.Errorf("stats: %+v", s)
	}

	c.Stop()
	c.Stop()
	waitFor(t, ctx, "StateStopped", rec.stopped)
	states, _, errs := rec.snapshot()
	if !slices.Equal(states, []int{mobile.StateJoining, mobile.StateLive, mobile.StateStopped}) || len(errs) != 0 {
		t.Fatalf("states %v, errors %v", states, errs)
	}
	if err := c.Send("after stop"); mobile.ErrorCode(err) != mobile.ErrCodeClosed {
		t.Fatalf("Send after Stop: %v (code %q)", err, mobile.ErrorCode(err))
	}
	if err := c.Announce("after stop"); mobile.ErrorCode(err) != mobile.ErrCodeClosed {
		t.Fatalf("Announce after Stop: %v (code %q)", err, mobile.ErrorCode(err))
	}
	if err := c.Start(rec); mobile.ErrorCode(err) != mobile.ErrCodeClosed {
		t.Fatalf("Start after Stop: %v (code %q)", err, mobile.ErrorCode(err))
	}
	c.Stop()
}

// TestLifecycle covers the failure and stop paths against a real gslb: a
// refused ticket reaches OnError with its code then StateStopped, a viewer's
// announcement is refused with the server's code, and Stop from inside a
// callback does not deadlock.
func TestLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole pipeline")
	}
	st := startStack(t)
	entry := st.URLs[stack.RoleGSLB]
	jitter := noJitterMs(t)

	t.Run("ticket refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rec := &recorder{t: t}
		c, err := mobile.NewClient(&mobile.Config{EntryURL: entry, Room: "refused", Ticket: "not-a-ticket", FirstJoinJitterMs: jitter})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(rec); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "StateStopped", rec.stopped)
		states, msgs, errs := rec.snapshot()
		if !slices.Equal(states, []int{mobile.StateJoining, mobile.StateStopped}) || len(msgs) != 0 || len(errs) != 1 {
			t.Fatalf("states %v, %d messages, errors %v", states, len(msgs), errs)
		}
		if code, _, _ := strings.Cut(errs[0], "|"); code != mobile.ErrCodeJoinRefused {
			t.Fatalf("OnError code %q (%s)", code, errs[0])
		}
		c.Stop()
	})

	t.Run("viewer announces", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rec := &recorder{t: t}
		c, err := mobile.NewClient(&mobile.Config{EntryURL: entry, Room: "viewers", Ticket: ticket(t, "viewer1", auth.RoleViewer), FirstJoinJitterMs: jitter})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(rec); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		err = c.Announce("not allowed")
		if code := mobile.ErrorCode(err); code != "forbidden" {
			t.Fatalf("viewer's Announce: %v (code %q)", err, code)
		}
		if c.Role() != auth.RoleViewer {
			t.Fatalf("Role = %q", c.Role())
		}
		c.Stop()
		waitFor(t, ctx, "StateStopped", rec.stopped)
	})

	t.Run("stop inside a callback", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rec := &recorder{t: t}
		c, err := mobile.NewClient(&mobile.Config{EntryURL: entry, Room: "stopper", Ticket: ticket(t, "viewer2", auth.RoleViewer), FirstJoinJitterMs: jitter})
		if err != nil {
			t.Fatal(err)
		}
		rec.onState = func(state int) {
			if state == mobile.StateLive {
				c.Stop()
				c.Stop()
			}
		}
		if err := c.Start(rec); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "StateStopped", rec.stopped)
		if states, _, errs := rec.snapshot(); !slices.Equal(states, []int{mobile.StateJoining, mobile.StateLive, mobile.StateStopped}) || len(errs) != 0 {
			t.Fatalf("states %v, errors %v", states, errs)
		}
	})

	t.Run("stop before start", func(t *testing.T) {
		c, err := mobile.NewClient(&mobile.Config{EntryURL: entry, Room: "never", Ticket: "t"})
		if err != nil {
			t.Fatal(err)
		}
		c.Stop()
		if err := c.Start(nil); mobile.ErrorCode(err) != mobile.ErrCodeClosed {
			t.Fatalf("Start after Stop: %v", err)
		}
	})
}
