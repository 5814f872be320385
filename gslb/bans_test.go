package gslb_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/ban"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
)

// TestEntryBans: a banned user's entry is refused, 403 banned — a room's
// ban in that room only, a global ban in every room — before any
// allocation, other users keep theirs, and a lifted or lapsed ban admits
// the user again. The bans are refreshed by hand on the fixture's clock.
func TestEntryBans(t *testing.T) {
	ctx := context.Background()
	f := newEntryFixture(t, true, healthyNodes()...)
	store := ban.NewMemoryStore()
	tickets, _ := auth.NewTicketVerifier(ticketKey, f.clk.Now)
	srv, err := gslb.NewServer(gslb.ServerConfig{Allocator: f.alloc, Keyring: f.ring, Tickets: tickets, CDN: "https://cdn/", Clock: f.clk, Logger: discard, Bans: store})
	if err != nil {
		t.Fatal(err)
	}
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb", Logger: discard})
	srv.Register(e)
	check := func(user, room string, want int) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/v1/entry?room="+room, nil)
		req.Header.Set("Authorization", "Bearer "+mintTicket(t, ticketKey, user, auth.Ticket{}, time.Hour))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != want || (want == http.StatusForbidden && errorCode(t, rec) != "banned") {
			t.Fatalf("%s in %s: %d %s, want %d", user, room, rec.Code, rec.Body, want)
		}
	}
	write := func(f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if err := srv.RefreshBans(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(func() error { return nil })
	check("u1", "stage", http.StatusOK)

	write(func() error { return store.Put(ctx, ban.Ban{User: "u1", Room: "stage", At: f.clk.Now()}) })
	check("u1", "stage", http.StatusForbidden)
	check("u1", "lobby", http.StatusOK)
	check("u2", "stage", http.StatusOK)

	write(func() error {
		return store.Put(ctx, ban.Ban{User: "u1", Until: f.clk.Now().Add(time.Minute), At: f.clk.Now()})
	})
	check("u1", "lobby", http.StatusForbidden)
	f.clk.Advance(time.Minute) // the global ban lapses
	check("u1", "lobby", http.StatusOK)
	check("u1", "stage", http.StatusForbidden)

	write(func() error { return store.Delete(ctx, "u1", "stage") })
	check("u1", "stage", http.StatusOK)
}

// TestEntryEventBans: a ban of an event refuses the user's entry to that
// event's rooms and to no other.
func TestEntryEventBans(t *testing.T) {
	ctx := context.Background()
	f := newEntryFixture(t, true, healthyNodes()...)
	now := f.clk.Now()
	dir := directoryOf(t, f.clk,
		event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "stage"}, {ID: "lobby"}}},
		event.Event{ID: "other", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "side"}}},
	)
	store := ban.NewMemoryStore()
	if err := store.Put(ctx, ban.Ban{User: "u1", Event: "show", At: now}); err != nil {
		t.Fatal(err)
	}
	tickets, _ := auth.NewTicketVerifier(ticketKey, f.clk.Now)
	srv, err := gslb.NewServer(gslb.ServerConfig{Allocator: f.alloc, Keyring: f.ring, Tickets: tickets, CDN: "https://cdn/", Clock: f.clk, Logger: discard, Bans: store, Events: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.RefreshBans(ctx); err != nil {
		t.Fatal(err)
	}
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb", Logger: discard})
	srv.Register(e)
	for room, want := range map[string]int{"stage": http.StatusForbidden, "lobby": http.StatusForbidden, "side": http.StatusOK} {
		if rec := getEntry(t, e, room); rec.Code != want {
			t.Errorf("%s: %d %s, want %d", room, rec.Code, rec.Body, want)
		}
	}
}
