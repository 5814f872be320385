package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/testwait"
	"danmaku/sdk"
	"danmaku/sdk/wire"
)

// startStack runs every role on free loopback ports until the test ends.
func startStack(t testing.TB, cfg Config) *Stack {
	t.Helper()
	if cfg.Backends.Shared.Streams == nil {
		cfg.Dev = true // in memory: as `danmaku dev`
	}
	cfg.GSLBAddr, cfg.IngestAddr, cfg.EdgeAddr, cfg.OriginAddr, cfg.SlicerAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stack run: %v", err)
		}
	})
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if err := st.Ready(rctx); err != nil {
		t.Fatalf("stack not ready: %v", err)
	}
	return st
}

// liveEvent is an event named after its one room, live for an hour.
func liveEvent(room string) event.Event {
	now := time.Now()
	return event.Event{ID: room, Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: room}}}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ticket mints a dev ticket; a host or admin role holds only in the rooms
// it names.
func ticket(t *testing.T, user, role string, rooms ...string) string {
	t.Helper()
	tk, err := auth.MintTicket(auth.DevTicketKey, user, auth.Ticket{Nick: user, Role: role, Rooms: rooms}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func postJSON(t *testing.T, url, bearer string, body any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %v", url, resp.StatusCode, out)
	}
	return out
}

// e2eClient is the SDK configuration of TestEndToEnd's clients. The test
// asserts that every message reaches every viewer, which the SDK promises
// only while it keeps up; on a loaded CI machine 200 pollers in one
// race-instrumented process fall behind, so the two rules that trade
// completeness for staying live are off here (each has its own tests in
// sdk/): jumping to live past FarBehind (it skipped the seconds holding
// the barrage) and the HTTP client's 10 s timeout (a post that timed out is
// a comment dropped). The test's context bounds every request instead.
func e2eClient(t *testing.T, entry, room, user, role string, noEdge bool) sdk.Config {
	return sdk.Config{
		EntryURL: entry, Room: room, Ticket: ticket(t, user, role, room), NoEdge: noEdge,
		FirstJoinJitter: -1, FarBehind: -1, HTTPClient: &http.Client{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// TestEndToEnd is acceptance 1 of the walking skeleton: 200 SDK viewers in
// one room, 20 senders under the budget, one host announcement and 3 gifts.
// Every viewer receives every gift and the announcement exactly once, and
// every barrage message. It asserts ids and counts only; the deadline is a
// guard against hanging, not a speed requirement.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test runs a few seconds of real segments")
	}
	const (
		room      = "e2e"
		viewers   = 200
		senders   = 20
		perSender = 3
	)
	st := startStack(t, Config{Events: []event.Event{liveEvent("e2e")}})
	entry := st.URLs[RoleGSLB]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	type got struct {
		mu   sync.Mutex
		byID map[string]int // by identity (lane and id): ids repeat across lanes
		text map[string]int // barrage "user|text" → count
		kind map[wire.Kind]int
	}
	results := make([]*got, viewers)
	clients := make([]*sdk.Client, viewers)
	fetched := make([]*fetchLog, viewers) // read only on failure (explainMissing)
	var wg sync.WaitGroup
	for i := range viewers {
		cfg := e2eClient(t, entry, room, fmt.Sprintf("viewer%d", i), auth.RoleViewer, false)
		fetched[i] = &fetchLog{}
		cfg.HTTPClient, cfg.Logger = fetched[i].client()
		c, err := sdk.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		g := &got{byID: map[string]int{}, text: map[string]int{}, kind: map[wire.Kind]int{}}
		results[i] = g
		wg.Add(2)
		go func() { defer wg.Done(); _ = c.Run(ctx) }()
		go func() {
			defer wg.Done()
			for m := range c.Messages() {
				g.mu.Lock()
				g.byID[m.Identity()]++
				g.kind[m.Kind]++
				if m.Kind == wire.KindBarrage {
					g.text[m.User+"|"+m.Text]++
				}
				g.mu.Unlock()
			}
		}()
	}
	// Every viewer has joined (and so polls from a second before any send).
	waitFor(t, ctx, "viewers joined", func() bool {
		for _, c := range clients {
			if c.Entry().Token == "" || c.Stats().EdgeConnects == 0 {
				return false
			}
		}
		return true
	})

	// Senders: SDK clients that only send (the throttle spaces their sends).
	sendClients := make([]*sdk.Client, senders)
	for i := range senders {
		c, err := sdk.New(e2eClient(t, entry, room, fmt.Sprintf("sender%d", i), auth.RoleViewer, true))
		if err != nil {
			t.Fatal(err)
		}
		sendClients[i] = c
		wg.Add(2)
		go func() { defer wg.Done(); _ = c.Run(ctx) }()
		go func() {
			defer wg.Done()
			for range c.Messages() {
			}
		}()
	}
	waitFor(t, ctx, "senders joined", func() bool {
		for _, c := range sendClients {
			if c.Entry().Token == "" {
				return false
			}
		}
		return true
	})
	want := map[string]bool{}
	for i, c := range sendClients {
		for j := range perSender {
			text := fmt.Sprintf("hello %d from %d", j, i)
			want[fmt.Sprintf("sender%d|%s", i, text)] = true
			if err := c.Send(ctx, text); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The host announces; the business server sends three gifts.
	host, err := sdk.New(e2eClient(t, entry, room, "host", auth.RoleHost, true))
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(2)
	go func() { defer wg.Done(); _ = host.Run(ctx) }()
	go func() {
		defer wg.Done()
		for range host.Messages() {
		}
	}()
	waitFor(t, ctx, "host joined", func() bool { return host.Entry().Token != "" })
	announceID, err := host.Announce(ctx, "welcome to the show")
	if err != nil {
		t.Fatal(err)
	}
	special := []string{wire.IdentityOf(wire.KindSystem, announceID)}
	for i := range 3 {
		out := postJSON(t, st.URLs[RoleIngest]+"/v1/gifts", DevServiceKey, map[string]any{
			"order_id": fmt.Sprintf("order-%d", i), "room": room, "user": fmt.Sprintf("fan%d", i), "gift": "rocket", "value": 5000, "count": 1,
		})
		special = append(special, wire.IdentityOf(wire.KindGift, out["id"].(string)))
	}

	waitFor(t, ctx, "every sender posted", func() bool {
		for _, c := range sendClients {
			if s := c.Stats(); s.SendsPosted+s.SendsFailed < perSender {
				return false
			}
		}
		return true
	})
	for i, c := range sendClients {
		if s := c.Stats(); s.SendsPosted != perSender || s.SendsDropped != 0 {
			t.Fatalf("sender %d stats: %+v", i, s)
		}
	}

	complete := func(g *got) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, id := range special {
			if g.byID[id] == 0 {
				return false
			}
		}
		for k := range want {
			if g.text[k] == 0 {
				return false
			}
		}
		return true
	}
	has := func(i int, k string) bool {
		g := results[i]
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.text[k] > 0
	}
	waitForOr(t, ctx, "every viewer has every message", func() bool {
		for _, g := range results {
			if !complete(g) {
				return false
			}
		}
		return true
	}, func() {
		explainMissing(t, st, room, want, has, fetched)
		incomplete := 0
		for i, g := range results {
			if complete(g) {
				continue
			}
			if incomplete == 0 {
				g.mu.Lock()
				t.Logf("viewer %d: kinds %v, %d barrage texts; stats %+v", i, g.kind, len(g.text), clients[i].Stats())
				for _, id := range special {
					t.Logf("  special %s: %d", id, g.byID[id])
				}
				g.mu.Unlock()
			}
			incomplete++
		}
		t.Logf("%d of %d viewers incomplete", incomplete, viewers)
	})
	// Let one more segment pass so that late duplicates (a gift from the
	// edge, then again in its segment) would have arrived.
	settle := st.cfg.Backends.Shared.Streams
	now, _ := settle.Now(ctx)
	waitFor(t, ctx, "one more segment", func() bool {
		n, _ := settle.Now(ctx)
		return n.Sub(now) > 2*time.Second
	})
	cancel()
	wg.Wait()

	// No message is in two segments.
	objects := st.cfg.Backends.Shared.Objects
	inSegments := map[string]int{}
	if obj, err := objects.Get(context.Background(), wire.ManifestKey(room)); err == nil {
		man, _ := wire.DecodeManifest(obj.Body)
		for sec := man.Second; ; sec-- {
			obj, err := objects.Get(context.Background(), wire.SegmentKey(room, sec))
			if err != nil {
				break
			}
			seg, err := wire.DecodeSegment(obj.Body)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range seg.Messages {
				inSegments[m.Identity()]++
				if inSegments[m.Identity()] > 1 {
					t.Errorf("message %s (%v) is in two segments, again in second %d", m.ID, m.Kind, sec)
				}
			}
		}
	}
	for i, g := range results {
		for _, id := range special {
			if g.byID[id] != 1 {
				t.Fatalf("viewer %d got special message %s %d times", i, id, g.byID[id])
			}
		}
		for k := range want {
			if g.text[k] != 1 {
				explainMissing(t, st, room, want, has, fetched)
				t.Fatalf("viewer %d got barrage %q %d times", i, k, g.text[k])
			}
		}
		for id, n := range g.byID {
			if n != 1 {
				t.Fatalf("viewer %d got id %s %d times", i, id, n)
			}
		}
		if g.kind[wire.KindBarrage] != senders*perSender || g.kind[wire.KindGift] != 3 || g.kind[wire.KindSystem] != 1 {
			t.Fatalf("viewer %d kinds = %v", i, g.kind)
		}
		if s := clients[i].Stats(); s.DecodeErrors != 0 || s.SeqGaps != 0 || s.DroppedBarrage != 0 {
			t.Fatalf("viewer %d stats: %+v", i, s)
		}
	}
}

func waitForOr(t *testing.T, ctx context.Context, what string, cond func() bool, diag func()) {
	t.Helper()
	if !testwait.Poll(ctx, cond) {
		diag()
		t.Fatalf("gave up waiting for: %s", what)
	}
}

// waitFor polls cond until it holds or ctx ends (then the test fails).
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	testwait.Ctx(t, ctx, what, cond)
}

// TestDurationChangeFollowed: a room switched from 1000 ms to 250 ms
// segments while a viewer watches keeps delivering: the slicer switches at
// a whole second, the viewer finds the new duration in the manifest and
// polls the new keys.
func TestDurationChangeFollowed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few seconds of real segments")
	}
	ev := liveEvent("switch")
	st := startStack(t, Config{Events: []event.Event{ev}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := sdk.New(sdk.Config{EntryURL: st.URLs[RoleGSLB], Room: "switch", Ticket: ticket(t, "viewer", auth.RoleViewer),
		NoEdge: true, FirstJoinJitter: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(ctx) }()
	sender := fetchEntry(t, st.URLs[RoleGSLB], "switch", ticket(t, "sender", auth.RoleViewer))
	send := func(text string) {
		postJSON(t, sender.Ingest[0]+"/v1/rooms/switch/barrage", sender.Token, map[string]string{"text": text})
	}
	await := func(text string) {
		t.Helper()
		for {
			select {
			case m := <-c.Messages():
				if m.Text == text {
					return
				}
			case <-ctx.Done():
				t.Fatalf("%q never arrived; stats %+v", text, c.Stats())
			}
		}
	}
	send("one second")
	await("one second")
	// Changed at run time through the operator API.
	ev.Rooms[0].SegmentMs = 250
	req, _ := http.NewRequest(http.MethodPut, st.URLs[RoleGSLB]+"/v1/admin/events/switch", bytes.NewReader(mustJSON(t, ev)))
	req.Header.Set("Authorization", "Bearer "+DevServiceKey)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT event: %v %v", err, resp)
	}
	// The slicer re-reads the events within a second and switches at the
	// next whole second after that: the manifest says when it has.
	waitFor(t, ctx, "the slicer writing 250 ms segments", func() bool {
		obj, err := st.cfg.Backends.Shared.Objects.Get(ctx, wire.ManifestKey("switch"))
		if err != nil {
			return false
		}
		man, err := wire.DecodeManifest(obj.Body)
		return err == nil && man.Dur == 250
	})
	send("quarter second")
	await("quarter second")
	if got := c.Stats(); got.SeqGaps != 0 || got.DecodeErrors != 0 {
		t.Fatalf("stats after the switch: %+v", got)
	}
}
