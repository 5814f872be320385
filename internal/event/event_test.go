package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/redisx/redistest"
)

var t0 = time.Date(2026, 12, 24, 20, 0, 0, 0, time.UTC)

func valid() event.Event {
	return event.Event{ID: "xmas", Start: t0, End: t0.Add(3 * time.Hour), Rooms: []event.Room{{ID: "main", Shares: []float64{0.1, 0.3, 0.2, 0.4}}, {ID: "vip", SegmentMs: 500}}}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*event.Event)
		want string // substring of the error; "" valid
	}{
		{"valid", func(*event.Event) {}, ""},
		{"bad id", func(e *event.Event) { e.ID = "x mas" }, "id:"},
		{"terminal escape in the title", func(e *event.Event) { e.Title = "\x1b]0;pwned\x07Xmas" }, "title: plain text only"},
		{"bidi override in the title", func(e *event.Event) { e.Title = "Xmas\u202e" }, "title: plain text only"},
		{"no start", func(e *event.Event) { e.Start = time.Time{} }, "start: required"},
		{"end before start", func(e *event.Event) { e.End = e.Start }, "end: must be after start"},
		{"too long", func(e *event.Event) { e.End = e.Start.Add(15 * 24 * time.Hour) }, "at most"},
		{"no rooms", func(e *event.Event) { e.Rooms = nil }, "rooms: at least one room"},
		{"room twice", func(e *event.Event) { e.Rooms[1].ID = "main" }, `rooms[1].id: room "main" appears twice`},
		{"bad room id", func(e *event.Event) { e.Rooms[0].ID = "a/b" }, "rooms[0].id"},
		{"three shares", func(e *event.Event) { e.Rooms[0].Shares = []float64{0.5, 0.3, 0.2} }, "rooms[0].shares: exactly 4 shares"},
		{"five shares", func(e *event.Event) { e.Rooms[0].Shares = []float64{0.2, 0.2, 0.2, 0.2, 0.2} }, "no more, no fewer (got 5)"},
		{"shares not summing to 1", func(e *event.Event) { e.Rooms[0].Shares = []float64{0.5, 0.5, 0.5, 0.5} }, "must sum to 1"},
		{"negative share", func(e *event.Event) { e.Rooms[0].Shares = []float64{-0.1, 0.5, 0.2, 0.4} }, "rooms[0].shares[0]"},
		{"NaN share", func(e *event.Event) { e.Rooms[0].Shares = []float64{math.NaN(), 0.5, 0.2, 0.3} }, "rooms[0].shares[0]"},
		{"bad segment", func(e *event.Event) { e.Rooms[1].SegmentMs = 300 }, "rooms[1].segment_ms: must be 1000, 500 or 250"},
		{"budget too big", func(e *event.Event) { e.Rooms[0].Budget = 1e6 }, "rooms[0].budget"},
		{"negative gift minimum", func(e *event.Event) { e.Rooms[0].MinGiftValue = -1 }, "min_gift_value"},
		{"negative limit", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{RoomRefill: -1} }, "limits.room_refill"},
		{"negative event refill", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{EventRefill: -5} }, "limits.event_refill"},
		{"duplicate window too long", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{DuplicateWindowMs: 3_600_000} }, "limits.duplicate_window_ms"},
		{"unknown word policy", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{Words: "block"} }, "limits.words"},
		{"fast lane cap not a number", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{FastLanePerSec: math.NaN()} }, "limits.fast_lane_per_s"},
		{"infinite gift backlog", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{GiftBacklogS: math.Inf(1)} }, "limits.gift_backlog_s"},
		{"user interval past its range", func(e *event.Event) { e.Rooms[0].Limits = &event.Limits{UserEveryMs: 1e12} }, "limits.user_every_ms: must be a number from 0 (the default) to 1e9"},
		{"several limits wrong: the first named", func(e *event.Event) {
			e.Rooms[0].Limits = &event.Limits{RoomRefill: 2e9, RoomCeiling: 2e9, UserBurst: 2e9, GiftBacklogS: 2e9}
		}, "limits.room_refill: must be a number from 0 (the default) to 1e9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := valid()
			tt.mut(&e)
			err := e.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want ErrInvalid naming %q", err, tt.want)
			}
		})
	}
}

func TestStateAt(t *testing.T) {
	e := valid()
	for _, tc := range []struct {
		at   time.Time
		want event.State
	}{{t0.Add(-time.Second), event.Scheduled}, {t0, event.Live}, {e.End.Add(-time.Nanosecond), event.Live}, {e.End, event.Ended}} {
		if got := e.StateAt(tc.at); got != tc.want {
			t.Errorf("StateAt(%v) = %s, want %s", tc.at, got, tc.want)
		}
	}
	early := t0.Add(time.Hour)
	e.EndedAt = &early
	if e.StateAt(early) != event.Ended || e.StateAt(early.Add(-time.Second)) != event.Live || !e.EndTime().Equal(early) {
		t.Error("an early end is not honoured")
	}
}

// TestStores runs one conformance suite against every Store.
func TestStores(t *testing.T) {
	for name, open := range map[string]func(*testing.T) event.Store{
		"memory": func(*testing.T) event.Store { return event.NewMemoryStore() },
		"redis":  func(t *testing.T) event.Store { return event.NewRedisStore(redistest.Client(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			e := valid()
			if err := s.Create(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := s.Create(ctx, e); !errors.Is(err, event.ErrExists) {
				t.Fatalf("second Create = %v, want ErrExists", err)
			}
			other := valid()
			other.ID = "boxing-day"
			if err := s.Update(ctx, other); !errors.Is(err, event.ErrNotFound) {
				t.Fatalf("Update of a missing event = %v", err)
			}
			e.Title = "changed"
			if err := s.Update(ctx, e); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "xmas")
			if err != nil || got.Title != "changed" || !got.Start.Equal(t0) || len(got.Rooms) != 2 || got.Rooms[1].SegmentMs != 500 {
				t.Fatalf("Get = %+v, %v", got, err)
			}
			if _, err := s.Get(ctx, "nope"); !errors.Is(err, event.ErrNotFound) {
				t.Fatalf("Get of a missing event = %v", err)
			}
			_ = s.Create(ctx, other)
			list, err := s.List(ctx)
			if err != nil || len(list) != 2 || list[0].ID != "boxing-day" {
				t.Fatalf("List = %v, %v", list, err)
			}
			if err := s.Delete(ctx, "xmas"); err != nil {
				t.Fatal(err)
			}
			if list, _ := s.List(ctx); len(list) != 1 {
				t.Fatalf("after Delete: %v", list)
			}
		})
	}
}

func TestDirectory(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0.Add(time.Minute))
	store := event.NewMemoryStore()
	rehearsal := event.Event{ID: "rehearsal", Start: t0.Add(-2 * time.Hour), End: t0.Add(-time.Hour), Rooms: []event.Room{{ID: "main", SegmentMs: 250}}}
	show := valid()
	for _, e := range []event.Event{rehearsal, show} {
		if err := store.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := event.NewDirectory(event.DirectoryConfig{Store: store, Clock: clk})
	if e := event.RoomHTTPError(d.Check("main")); d.Ready() || !errors.Is(d.Check("main"), event.ErrNotLoaded) ||
		e.Code != "events_unavailable" || e.Status != http.StatusServiceUnavailable || e.RetryAfter <= 0 {
		t.Fatal("an unloaded directory must answer a retryable 503")
	}
	if err := d.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// The live event wins over the rehearsal that ended.
	v, ok := d.Lookup("main")
	if !ok || v.Event.ID != "xmas" || v.State != event.Live || v.Room.SegmentMs != 0 {
		t.Fatalf("Lookup(main) = %+v", v)
	}
	if d.Check("main") != nil || !errors.Is(d.Check("nowhere"), event.ErrNoSuchRoom) ||
		event.RoomHTTPError(d.Check("nowhere")).Code != "no_such_room" || len(d.LiveRooms()) != 2 {
		t.Fatal("live rooms")
	}
	// Before the show: a gslb refuses it; a node serving a token the gslb
	// issued takes it from 5 s before the start (its clock may be behind).
	clk.Set(show.Start.Add(-6 * time.Second))
	if err := d.CheckIssued("main"); !errors.Is(err, event.ErrRoomNotLive) {
		t.Fatalf("6 s before the start, CheckIssued: %v", err)
	}
	clk.Set(show.Start.Add(-event.IssuedLeeway))
	if err := d.Check("main"); !errors.Is(err, event.ErrRoomNotLive) {
		t.Fatalf("5 s before the start, Check: %v", err)
	}
	if err := d.CheckIssued("main"); err != nil || !errors.Is(d.CheckIssued("nowhere"), event.ErrNoSuchRoom) {
		t.Fatalf("5 s before the start, CheckIssued: %v", err)
	}
	clk.Set(show.End)
	if err := d.CheckIssued("main"); !errors.Is(err, event.ErrRoomNotLive) {
		t.Fatalf("after the end, CheckIssued: %v", err)
	}
	if err := d.Check("main"); !errors.Is(err, event.ErrRoomNotLive) {
		t.Fatalf("after the end: %v", err)
	}
	if e := event.RoomHTTPError(d.Check("main")); e.Code != "room_not_live" || e.Status != http.StatusConflict {
		t.Fatalf("after the end: %v", e)
	}
	if v, _ := d.Lookup("main"); v.Event.ID != "xmas" {
		t.Fatalf("after both ended, the last to end wins: %s", v.Event.ID)
	}
	if e := event.RoomHTTPError(errors.New("not Check's")); e.Status != http.StatusInternalServerError {
		t.Fatalf("another error: %v, want a 500", e)
	}
}

// TestAPI: the operator API creates, lists, changes, ends and deletes
// events, refuses without a key, and keeps a room in one event at a time.
func TestAPI(t *testing.T) {
	clk := clock.NewFake(t0.Add(time.Minute))
	store := event.NewMemoryStore()
	changed := 0
	api := &event.API{Store: store, Keys: []string{"op"}, Clock: clk, Changed: func(context.Context) { changed++ }}
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb"})
	api.Register(e)
	do := func(method, path, key string, body any) (int, map[string]any) {
		var rd *strings.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		} else {
			rd = strings.NewReader("")
		}
		req := httptest.NewRequest(method, path, rd)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	code := func(out map[string]any) string {
		if e, ok := out["error"].(map[string]any); ok {
			return e["code"].(string)
		}
		return ""
	}
	if st, out := do("POST", "/v1/admin/events", "", valid()); st != 401 || code(out) != "bad_operator_key" {
		t.Fatalf("no key: %d %v", st, out)
	}
	// The title is cleaned as comments are: a terminal escape and a bidi
	// override are dropped, white space collapsed.
	titled := valid()
	titled.Title = "\x1b[2J Xmas\u202e\n  concert\x00 "
	if st, out := do("POST", "/v1/admin/events", "op", titled); st != 201 || out["state"] != "live" || out["title"] != "[2J Xmas concert" {
		t.Fatalf("create: %d %v", st, out)
	}
	if st, out := do("POST", "/v1/admin/events", "op", valid()); st != 409 || code(out) != "event_exists" {
		t.Fatalf("create twice: %d %v", st, out)
	}
	taken := valid()
	taken.ID = "pirate"
	if st, out := do("POST", "/v1/admin/events", "op", taken); st != 409 || code(out) != "room_taken" {
		t.Fatalf("a room in two events: %d %v", st, out)
	}
	bad := valid()
	bad.ID = "bad"
	bad.Rooms[0].Shares = []float64{1}
	if st, out := do("POST", "/v1/admin/events", "op", bad); st != 400 || code(out) != "bad_event" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "exactly 4 shares") {
		t.Fatalf("bad shares: %d %v", st, out)
	}
	if st, out := do("POST", "/v1/admin/events", "op", map[string]any{"id": "x", "surprise": 1}); st != 400 || code(out) != "bad_json" {
		t.Fatalf("unknown field: %d %v", st, out)
	}
	upd := valid()
	upd.Rooms[0].Budget = 120
	if st, out := do("PUT", "/v1/admin/events/xmas", "op", upd); st != 200 {
		t.Fatalf("update: %d %v", st, out)
	}
	if st, out := do("PUT", "/v1/admin/events/other", "op", upd); st != 400 {
		t.Fatalf("update with another id in the body: %d %v", st, out)
	}
	if st, out := do("DELETE", "/v1/admin/events/xmas", "op", nil); st != 409 || code(out) != "event_not_ended" {
		t.Fatalf("delete a live event: %d %v", st, out)
	}
	if st, out := do("POST", "/v1/admin/events/xmas/end", "op", nil); st != 200 || out["state"] != "ended" {
		t.Fatalf("end: %d %v", st, out)
	}
	if st, out := do("PUT", "/v1/admin/events/xmas", "op", upd); st != 409 || code(out) != "event_ended" {
		t.Fatalf("update an ended event: %d %v", st, out)
	}
	// Its rooms are free again.
	if st, out := do("POST", "/v1/admin/events", "op", taken); st != 201 {
		t.Fatalf("a room of an ended event: %d %v", st, out)
	}
	if st, out := do("GET", "/v1/admin/events", "op", nil); st != 200 || len(out["events"].([]any)) != 2 {
		t.Fatalf("list: %d %v", st, out)
	}
	if st, _ := do("DELETE", "/v1/admin/events/xmas", "op", nil); st != 200 {
		t.Fatalf("delete: %d", st)
	}
	if st, out := do("GET", "/v1/admin/events/xmas", "op", nil); st != 404 || code(out) != "no_such_event" {
		t.Fatalf("get deleted: %d %v", st, out)
	}
	if changed != 5 {
		t.Fatalf("Changed called %d times, want 5 (create, update, end, create, delete)", changed)
	}
}

// TestEventRefill: one global rate per event, from the first room that
// sets it, whichever room asks.
func TestEventRefill(t *testing.T) {
	e := &event.Event{Rooms: []event.Room{
		{ID: "a"},
		{ID: "b", Limits: &event.Limits{RoomRefill: 50}},
		{ID: "c", Limits: &event.Limits{EventRefill: 3000}},
		{ID: "d", Limits: &event.Limits{EventRefill: 9000}},
	}}
	if got := e.EventRefill(); got != 3000 {
		t.Fatalf("EventRefill = %v, want 3000 (room c's)", got)
	}
	if got := (&event.Event{Rooms: []event.Room{{ID: "a"}}}).EventRefill(); got != 0 {
		t.Fatalf("EventRefill without a setting = %v, want 0", got)
	}
}

// TestLookupCarriesEventRefill: the directory's view of every room of an
// event carries the event's one rate, and each room its own settings,
// found without a search.
func TestLookupCarriesEventRefill(t *testing.T) {
	now := time.Now()
	e := event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{
		{ID: "a"},
		{ID: "b", Limits: &event.Limits{RoomRefill: 50}},
		{ID: "c", Limits: &event.Limits{EventRefill: 3000}},
	}}
	d, err := event.DirectoryOf(clock.NewFake(now), e)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		v, ok := d.Lookup(id)
		if !ok || v.EventRefill != 3000 || v.Room.ID != id || v.Event.ID != "show" {
			t.Fatalf("Lookup(%s) = %+v, %v", id, v, ok)
		}
	}
	if v, _ := d.Lookup("b"); v.Room.Limits == nil || v.Room.Limits.RoomRefill != 50 {
		t.Fatalf("room b's own settings lost: %+v", v.Room)
	}
}

// TestScopeRequired: a paid event makes every room take scoped tickets
// only, a paid room itself alone; the field survives the JSON an operator
// writes.
func TestScopeRequired(t *testing.T) {
	now := time.Now()
	var free, paid event.Event
	for p, doc := range map[*event.Event]string{
		&free: `{"id":"free","start":"2026-01-01T00:00:00Z","end":"2026-01-02T00:00:00Z","rooms":[{"id":"hall"},{"id":"vip","ticket_scope_required":true}]}`,
		&paid: `{"id":"paid","start":"2026-01-01T00:00:00Z","end":"2026-01-02T00:00:00Z","ticket_scope_required":true,"rooms":[{"id":"stage"}]}`,
	} {
		if err := json.Unmarshal([]byte(doc), p); err != nil {
			t.Fatal(err)
		}
		p.Start, p.End = now.Add(-time.Minute), now.Add(time.Hour)
	}
	d, err := event.DirectoryOf(clock.NewFake(now), free, paid)
	if err != nil {
		t.Fatal(err)
	}
	for room, want := range map[string]bool{"hall": false, "vip": true, "stage": true} {
		if v, ok := d.Lookup(room); !ok || v.ScopeRequired() != want {
			t.Errorf("%s: ScopeRequired = %v, want %v", room, v.ScopeRequired(), want)
		}
	}
}
