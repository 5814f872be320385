package gslb_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/sdk/wire"
)

var (
	ticketKey = []byte("gslb-test-ticket-key-0123456789-")
	master    = []byte("gslb-test-master-key-0123456789-0123456789")
)

// entryFixture is an entry endpoint on a fake clock started at the wall clock
// (MintTicket stamps tickets with time.Now).
type entryFixture struct {
	*fixture
	ring   *auth.Keyring
	reg    *prometheus.Registry
	engine *gin.Engine
}

func newEntryFixture(t testing.TB, withSecrets bool, nodes ...loadtable.NodeLoad) *entryFixture {
	t.Helper()
	return newEntryFixtureWith(t, withSecrets, gslb.AllocatorConfig{}, gslb.ServerConfig{}, nodes...)
}

// newEntryFixtureWith is newEntryFixture with the allocator's and the
// server's other settings from acfg and scfg. acfg.Table, if set, must
// read from the fixture's memory table (a wrapper), which it reports into.
func newEntryFixtureWith(t testing.TB, withSecrets bool, acfg gslb.AllocatorConfig, scfg gslb.ServerConfig, nodes ...loadtable.NodeLoad) *entryFixture {
	t.Helper()
	clk := clock.NewFake(time.Now())
	mem := loadtable.NewMemoryTable()
	if w, ok := acfg.Table.(*flakyTable); ok {
		mem = w.Table.(*loadtable.MemoryTable)
	}
	f := &fixture{clk: clk, table: mem}
	if acfg.Table == nil {
		acfg.Table = mem
	}
	acfg.Clock, acfg.Logger = clk, discard
	alloc, err := gslb.NewAllocator(acfg)
	if err != nil {
		t.Fatal(err)
	}
	f.alloc = alloc
	f.report(t, nodes...)
	f.sync(t)

	secrets := auth.NewMemorySecrets()
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: master, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if withSecrets {
		center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: master, Clock: clk, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := center.Publish(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := ring.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tickets, err := auth.NewTicketVerifier(ticketKey, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	scfg.Allocator, scfg.Keyring, scfg.Tickets, scfg.CDN = alloc, ring, tickets, "https://cdn.example"
	scfg.Registerer, scfg.Clock, scfg.Logger = reg, clk, discard
	srv, err := gslb.NewServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	engine := httpx.NewEngine(httpx.EngineConfig{Role: "gslb", Logger: discard, Gatherer: reg})
	srv.Register(engine)
	return &entryFixture{fixture: f, ring: ring, reg: reg, engine: engine}
}

func healthyNodes() []loadtable.NodeLoad {
	return []loadtable.NodeLoad{
		edge("e1", 10, 100), edge("e2", 20, 100), edge("e3", 30, 100),
		ingest("i1", 0, 100), ingest("i2", 0, 100), ingest("i3", 0, 100),
	}
}

func mintTicket(t testing.TB, key []byte, user string, tk auth.Ticket, ttl time.Duration) string {
	t.Helper()
	s, err := auth.MintTicket(key, user, tk, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *entryFixture) get(target, ticket string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if ticket != "" {
		req.Header.Set("Authorization", "Bearer "+ticket)
	}
	rec := httptest.NewRecorder()
	f.engine.ServeHTTP(rec, req)
	return rec
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func errorCode(t testing.TB, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q is not JSON: %v", rec.Body.String(), err)
	}
	if b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("error body %q lacks code or message", rec.Body.String())
	}
	return b.Error.Code
}

func entriesCounter(t testing.TB, reg *prometheus.Registry, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "danmaku_gslb_entries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestEntryOK(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	ticket := mintTicket(t, ticketKey, "user-7", auth.Ticket{Nick: "长长的昵称超过六个字", Avatar: "a9", Role: auth.RoleHost, Rooms: []string{"room_1-A"}}, time.Hour)

	for _, tc := range []struct {
		name   string
		target string
		header string
	}{
		{"bearer header", "/v1/entry?room=room_1-A", ticket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.get(tc.target, tc.header)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got gslb.Entry
			dec := json.NewDecoder(strings.NewReader(rec.Body.String()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("body %s: %v", rec.Body, err)
			}
			now := f.clk.Now()
			if got.Room != "room_1-A" || got.User != "user-7" || got.Role != auth.RoleHost {
				t.Errorf("room/user/role = %q/%q/%q", got.Room, got.User, got.Role)
			}
			if len(got.Ingest) != 3 || len(got.Edge) != 3 {
				t.Errorf("ingest %v, edge %v: want 3 each (chosen + 2 fallbacks)", got.Ingest, got.Edge)
			}
			if got.CDN != "https://cdn.example/" {
				t.Errorf("cdn = %q, want a trailing slash", got.CDN)
			}
			if got.ServerTimeMs != now.UnixMilli() {
				t.Errorf("server_time_ms = %d, want %d", got.ServerTimeMs, now.UnixMilli())
			}
			if want := now.Add(f.ring.TokenTTL()).UnixMilli(); got.TokenExpiresMs != want {
				t.Errorf("token_expires_ms = %d, want %d", got.TokenExpiresMs, want)
			}
			if got.SegmentMs != 1000 || got.PublishDelayMs != wire.DefaultPublishDelayMs {
				t.Errorf("segment_ms = %d, publish_delay_ms = %d", got.SegmentMs, got.PublishDelayMs)
			}

			claims, err := f.ring.Verify(got.Token)
			if err != nil {
				t.Fatalf("token does not verify: %v", err)
			}
			if claims.Room != "room_1-A" || claims.User() != "user-7" || claims.Role != auth.RoleHost || claims.Avatar != "a9" {
				t.Errorf("claims = %+v", claims)
			}
			if claims.Nick != "长长的昵称超" {
				t.Errorf("nick = %q, want the first 6 characters", claims.Nick)
			}
			if want := append(slices.Clone(got.Ingest), got.Edge...); !slices.Equal(claims.Addrs, want) {
				t.Errorf("token addrs = %v, want %v", claims.Addrs, want)
			}
			if claims.Ingests != len(got.Ingest) || !slices.Equal(claims.IngestAddrs(), got.Ingest) {
				t.Errorf("token ingests = %d %v, want %v", claims.Ingests, claims.IngestAddrs(), got.Ingest)
			}
			// The primary is the allocator's rendezvous choice for the user.
			if a, err := f.alloc.Allocate("user-7", netip.Addr{}); err != nil || claims.IngestAddrs()[0] != a.Ingest[0] {
				t.Errorf("token primary %s, allocator's choice %v (%v)", claims.IngestAddrs()[0], a.Ingest, err)
			}
			if claims.Login != now.UnixMilli() {
				t.Errorf("login = %d, want %d", claims.Login, now.UnixMilli())
			}
			for _, a := range got.Ingest {
				if !claims.HasAddr(a) {
					t.Errorf("token not bound to ingest %s", a)
				}
			}
		})
	}
	if n := entriesCounter(t, f.reg, "ok"); n != 1 {
		t.Errorf("entries{code=ok} = %v, want 1", n)
	}
}

func TestEntryBadInput(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	good := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	for _, tc := range []struct {
		name   string
		target string
		ticket string
		status int
		code   string
	}{
		{"missing room", "/v1/entry", good, 400, "bad_room"},
		{"empty room", "/v1/entry?room=", good, 400, "bad_room"},
		{"room with a space", "/v1/entry?room=a%20b", good, 400, "bad_room"},
		{"room with a slash", "/v1/entry?room=a%2Fb", good, 400, "bad_room"},
		{"room with a dot", "/v1/entry?room=a.b", good, 400, "bad_room"},
		{"room with a brace", "/v1/entry?room=%7Broom%7D", good, 400, "bad_room"},
		{"non-ASCII room", "/v1/entry?room=%E6%88%BF", good, 400, "bad_room"},
		{"65-char room", "/v1/entry?room=" + strings.Repeat("r", 65), good, 400, "bad_room"},
		{"missing ticket", "/v1/entry?room=r1", "", 401, "no_ticket"},
		{"empty ticket query", "/v1/entry?room=r1&ticket=", "", 400, "ticket_in_query"},
		{"ticket in the query", "/v1/entry?room=r1&ticket=" + good, "", 400, "ticket_in_query"},
		{"ticket in the query beside the header", "/v1/entry?room=r1&ticket=" + good, good, 400, "ticket_in_query"},
		{"60-day ticket", "/v1/entry?room=r1", mintTicket(t, ticketKey, "u1", auth.Ticket{}, 60*24*time.Hour), 401, "ticket_lifetime"},
		{"garbage ticket", "/v1/entry?room=r1", "garbage", 401, "bad_ticket"},
		{"expired ticket", "/v1/entry?room=r1", mintTicket(t, ticketKey, "u1", auth.Ticket{}, -time.Minute), 401, "bad_ticket"},
		{"ticket of another key", "/v1/entry?room=r1", mintTicket(t, []byte("some-other-ticket-key-0123456"), "u1", auth.Ticket{}, time.Hour), 401, "bad_ticket"},
		{"ticket with a bad role", "/v1/entry?room=r1", mintTicket(t, ticketKey, "u1", auth.Ticket{Role: "root"}, time.Hour), 401, "bad_ticket"},
		{"ticket without user", "/v1/entry?room=r1", mintTicket(t, ticketKey, "", auth.Ticket{}, time.Hour), 401, "bad_ticket"},
		{"a dynamic token is not a ticket", "/v1/entry?room=r1", func() string {
			tok, _, err := f.ring.Sign(auth.Claims{Room: "r1", Role: auth.RoleViewer})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}(), 401, "bad_ticket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.get(tc.target, tc.ticket)
			if rec.Code != tc.status {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if code := errorCode(t, rec); code != tc.code {
				t.Fatalf("code = %q, want %q", code, tc.code)
			}
		})
	}
	if n := entriesCounter(t, f.reg, "bad_room"); n != 8 {
		t.Errorf("entries{code=bad_room} = %v, want 8", n)
	}
	// The longest valid room passes.
	if rec := f.get("/v1/entry?room="+strings.Repeat("r", 64), good); rec.Code != http.StatusOK {
		t.Errorf("64-char room: status %d: %s", rec.Code, rec.Body)
	}
}

func TestEntryRoutes(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	for _, tc := range []struct {
		method, target string
		status         int
		code           string
	}{
		{http.MethodPost, "/v1/entry?room=r1", 405, "method_not_allowed"},
		{http.MethodGet, "/v1/entries", 404, "not_found"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			rec := httptest.NewRecorder()
			f.engine.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
			if rec.Code != tc.status || errorCode(t, rec) != tc.code {
				t.Fatalf("status %d body %s, want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
		})
	}
	f.get("/v1/entry", "") // a counted request, so the counter vector has a child
	rec := f.get("/metrics", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "danmaku_gslb_entries_total") {
		t.Errorf("/metrics: %d %.200s", rec.Code, rec.Body)
	}
}

func TestEntryNoNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []loadtable.NodeLoad
	}{
		{"empty table", nil},
		{"no ingest", []loadtable.NodeLoad{edge("e1", 0, 100)}},
		{"all overloaded", []loadtable.NodeLoad{edge("e1", 99, 100), ingest("i1", 99, 100)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEntryFixture(t, true, tc.nodes...)
			rec := f.get("/v1/entry?room=r1", mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour))
			if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "no_nodes" {
				t.Fatalf("status %d body %s, want 503 no_nodes", rec.Code, rec.Body)
			}
			checkRetryAfter(t, rec)
		})
	}
}

func TestEntryTokenUnavailable(t *testing.T) {
	f := newEntryFixture(t, false, healthyNodes()...)
	rec := f.get("/v1/entry?room=r1", mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour))
	if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "token_unavailable" {
		t.Fatalf("status %d body %s, want 503 token_unavailable", rec.Code, rec.Body)
	}
	checkRetryAfter(t, rec)
	if n := entriesCounter(t, f.reg, "token_unavailable"); n != 1 {
		t.Errorf("entries{code=token_unavailable} = %v", n)
	}
}

// The client address reaches the line classifier.
func TestEntryClassifiesClientIP(t *testing.T) {
	clk := clock.NewFake(time.Now())
	mem := loadtable.NewMemoryTable()
	lineA := netip.MustParsePrefix("10.0.0.0/8")
	alloc, err := gslb.NewAllocator(gslb.AllocatorConfig{
		Table: mem, Clock: clk, Logger: discard, Fallbacks: -1,
		Classify: func(ip netip.Addr) string {
			if lineA.Contains(ip) {
				return "A"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{clk: clk, table: mem, alloc: alloc}
	f.report(t, onLine(edge("a-e1", 50, 100), "A"), onLine(ingest("a-i1", 50, 100), "A"), edge("bgp-e1", 0, 100), ingest("bgp-i1", 0, 100))
	f.sync(t)
	secrets := auth.NewMemorySecrets()
	center, _ := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: master, Clock: clk})
	ring, _ := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: master, Clock: clk})
	if err := center.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ring.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tickets, _ := auth.NewTicketVerifier(ticketKey, clk.Now)
	srv, err := gslb.NewServer(gslb.ServerConfig{Allocator: alloc, Keyring: ring, Tickets: tickets, CDN: "https://cdn/", Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	engine := httpx.NewEngine(httpx.EngineConfig{Logger: discard})
	srv.Register(engine)
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	for _, tc := range []struct {
		remote     string
		edge, ingr string
	}{
		{"10.9.8.7:5555", "ws://a-e1", "http://a-i1"},
		{"203.0.113.9:5555", "ws://bgp-e1", "http://bgp-i1"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/v1/entry?room=r1", nil)
		req.RemoteAddr = tc.remote
		req.Header.Set("Authorization", "Bearer "+ticket)
		rec := httptest.NewRecorder()
		engine.ServeHTTP(rec, req)
		var got gslb.Entry
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
			t.Fatalf("%s: %d %s", tc.remote, rec.Code, rec.Body)
		}
		if !slices.Equal(got.Edge, []string{tc.edge}) || !slices.Equal(got.Ingest, []string{tc.ingr}) {
			t.Errorf("%s: edge %v ingest %v, want %s %s", tc.remote, got.Edge, got.Ingest, tc.edge, tc.ingr)
		}
	}
}

func TestServerConfig(t *testing.T) {
	f := newEntryFixture(t, true)
	tickets, _ := auth.NewTicketVerifier(ticketKey, nil)
	for _, tc := range []struct {
		name string
		cfg  gslb.ServerConfig
	}{
		{"no allocator", gslb.ServerConfig{Keyring: f.ring, Tickets: tickets, CDN: "x/"}},
		{"no keyring", gslb.ServerConfig{Allocator: f.alloc, Tickets: tickets, CDN: "x/"}},
		{"no tickets", gslb.ServerConfig{Allocator: f.alloc, Keyring: f.ring, CDN: "x/"}},
		{"no cdn", gslb.ServerConfig{Allocator: f.alloc, Keyring: f.ring, Tickets: tickets}},
		{"negative in-flight bound", gslb.ServerConfig{Allocator: f.alloc, Keyring: f.ring, Tickets: tickets, CDN: "x/", MaxInFlight: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := gslb.NewServer(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	// Two servers on one registry collide on their metric.
	if _, err := gslb.NewServer(gslb.ServerConfig{Allocator: f.alloc, Keyring: f.ring, Tickets: tickets, CDN: "x", Registerer: f.reg}); err == nil {
		t.Error("second server registered the same metric")
	}
}

// TestEntryTiming: the entry hands out the time of the clock that decides
// segments (not the gslb host's) and the room's own segment duration.
func TestEntryTiming(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	now := f.clk.Now()
	dir := directoryOf(t, f.clk, event.Event{ID: "ev", Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		Rooms: []event.Room{{ID: "fast", SegmentMs: 250}, {ID: "plain"}}})
	storeClock := clock.NewFake(now.Add(-2 * time.Second)) // the gslb host runs 2 s ahead
	e := entryEngine(t, f, gslb.ServerConfig{ServerClock: storeClock, Events: dir})
	for room, wantMs := range map[string]int64{"fast": 250, "plain": 1000} {
		rec := getEntry(t, e, room)
		var got gslb.Entry
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
			t.Fatalf("%s: %d %s", room, rec.Code, rec.Body)
		}
		if got.SegmentMs != wantMs || got.ServerTimeMs != storeClock.Now().UnixMilli() {
			t.Fatalf("%s: segment_ms %d server_time_ms %d, want %d and the store clock's %d", room, got.SegmentMs, got.ServerTimeMs, wantMs, storeClock.Now().UnixMilli())
		}
	}
}

// TestEntryOnlyLiveRooms: only a room of a live event gets an entry; any
// other name is refused with a code before the ticket is even read.
func TestEntryOnlyLiveRooms(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	now := f.clk.Now()
	dir := directoryOf(t, f.clk,
		event.Event{ID: "live", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "stage"}}},
		event.Event{ID: "later", Start: now.Add(time.Hour), End: now.Add(2 * time.Hour), Rooms: []event.Room{{ID: "encore"}}},
		event.Event{ID: "past", Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour), Rooms: []event.Room{{ID: "soundcheck"}}},
	)
	e := entryEngine(t, f, gslb.ServerConfig{Events: dir})
	for room, want := range map[string]struct {
		status int
		code   string
	}{
		"stage":      {http.StatusOK, ""},
		"nowhere":    {http.StatusNotFound, "no_such_room"},
		"encore":     {http.StatusConflict, "room_not_live"},
		"soundcheck": {http.StatusConflict, "room_not_live"},
	} {
		rec := getEntry(t, e, room)
		if rec.Code != want.status || (want.code != "" && errorCode(t, rec) != want.code) {
			t.Errorf("%s: %d %s, want %d %s", room, rec.Code, rec.Body, want.status, want.code)
		}
	}
	// Not loaded yet: a retryable 503, not a 404 for every room.
	empty, _ := event.NewDirectory(event.DirectoryConfig{Store: event.NewMemoryStore(), Clock: f.clk})
	if rec := getEntry(t, entryEngine(t, f, gslb.ServerConfig{Events: empty}), "stage"); rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "events_unavailable" {
		t.Errorf("before the first load: %d %s", rec.Code, rec.Body)
	}
}

// TestEntryScope: a ticket enters only the rooms and event it names; host
// and admin hold only there, so a host of room A is no host of room B; a
// paid room refuses an unscoped ticket.
func TestEntryScope(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	now := f.clk.Now()
	dir := directoryOf(t, f.clk,
		event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour),
			Rooms: []event.Room{{ID: "room-a"}, {ID: "room-b"}, {ID: "vip", TicketScopeRequired: true}}},
		event.Event{ID: "paid", Start: now.Add(-time.Minute), End: now.Add(time.Hour), TicketScopeRequired: true,
			Rooms: []event.Room{{ID: "stage"}}},
	)
	e := entryEngine(t, f, gslb.ServerConfig{Events: dir})
	hostA := auth.Ticket{Role: auth.RoleHost, Rooms: []string{"room-a"}}
	unscopedHost := auth.Ticket{Role: auth.RoleHost}
	showAdmin := auth.Ticket{Role: auth.RoleAdmin, Event: "show"}
	paidViewer := auth.Ticket{Event: "paid"}
	for _, c := range []struct {
		name   string
		tk     auth.Ticket
		room   string
		status int
		code   string // or the role of a 200
	}{
		{"host of A in A", hostA, "room-a", 200, auth.RoleHost},
		{"host of A in B", hostA, "room-b", 403, "ticket_scope"},
		{"unscoped host in B: a viewer", unscopedHost, "room-b", 200, auth.RoleViewer},
		{"event admin in B", showAdmin, "room-b", 200, auth.RoleAdmin},
		{"event admin in another event", showAdmin, "stage", 403, "ticket_scope"},
		{"unscoped viewer in a paid room", auth.Ticket{}, "vip", 403, "ticket_scope_required"},
		{"unscoped host in a paid event", unscopedHost, "stage", 403, "ticket_scope_required"},
		{"scoped viewer in a paid event", paidViewer, "stage", 200, auth.RoleViewer},
		{"event admin in its paid room", showAdmin, "vip", 200, auth.RoleAdmin},
		{"rooms and event both narrow", auth.Ticket{Rooms: []string{"stage"}, Event: "show"}, "stage", 403, "ticket_scope"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/v1/entry?room="+c.room, nil)
		req.Header.Set("Authorization", "Bearer "+mintTicket(t, ticketKey, "u1", c.tk, time.Hour))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.status)
			continue
		}
		if c.status != 200 {
			if code := errorCode(t, rec); code != c.code {
				t.Errorf("%s: code %s, want %s", c.name, code, c.code)
			}
			continue
		}
		var got gslb.Entry
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		claims, err := f.ring.Verify(got.Token)
		if err != nil {
			t.Fatal(err)
		}
		// The token's role is what the ingest and edge act on, for its room.
		if got.Role != c.code || claims.Role != c.code || claims.Room != c.room {
			t.Errorf("%s: answer role %s, token role %s room %s, want %s in %s", c.name, got.Role, claims.Role, claims.Room, c.code, c.room)
		}
	}
}

func directoryOf(t *testing.T, clk clock.Clock, events ...event.Event) *event.Directory {
	t.Helper()
	dir, err := event.DirectoryOf(clk, events...)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// entryEngine serves an entry endpoint built from f's allocator and keys
// and cfg's other fields.
func entryEngine(t *testing.T, f *entryFixture, cfg gslb.ServerConfig) *gin.Engine {
	t.Helper()
	tickets, _ := auth.NewTicketVerifier(ticketKey, f.clk.Now)
	cfg.Allocator, cfg.Keyring, cfg.Tickets, cfg.CDN, cfg.Clock, cfg.Logger = f.alloc, f.ring, tickets, "https://cdn/", f.clk, discard
	srv, err := gslb.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb", Logger: discard})
	srv.Register(e)
	return e
}

func getEntry(t *testing.T, e *gin.Engine, room string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/entry?room="+room, nil)
	req.Header.Set("Authorization", "Bearer "+mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour))
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// checkRetryAfter: every 503 of the entry carries a Retry-After of 1-3 s.
func checkRetryAfter(t testing.TB, rec *httptest.ResponseRecorder) int {
	t.Helper()
	ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3 {
		t.Fatalf("Retry-After = %q, want 1-3", rec.Header().Get("Retry-After"))
	}
	return ra
}

// The entry's 503s spread their clients' retries over 1-3 s, so that the
// viewers a surge turned away do not come back in the same second.
func TestEntryRetryAfterJitter(t *testing.T) {
	f := newEntryFixture(t, true) // no nodes: 503 no_nodes
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	seen := map[int]int{}
	for range 300 {
		rec := f.get("/v1/entry?room=r1", ticket)
		if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "no_nodes" {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		seen[checkRetryAfter(t, rec)]++
	}
	// Each of three values has a third of 300 answers; missing one has odds
	// of 3·(2/3)^300.
	if len(seen) != 3 {
		t.Errorf("Retry-After values %v, want all of 1, 2 and 3", seen)
	}
}

// Beyond MaxInFlight concurrent entries the endpoint answers 503 overloaded
// at once rather than queueing; it serves again as soon as one finishes.
func TestEntryOverloaded(t *testing.T) {
	const limit = 3
	entered := make(chan struct{}, limit)
	release := make(chan struct{})
	var hold atomic.Bool
	hold.Store(true)
	classify := func(netip.Addr) string {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
		return ""
	}
	f := newEntryFixtureWith(t, true, gslb.AllocatorConfig{Classify: classify}, gslb.ServerConfig{MaxInFlight: limit}, healthyNodes()...)
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)

	// limit requests held inside the allocator (the classifier waits).
	done := make(chan int, limit)
	for range limit {
		go func() { done <- f.get("/v1/entry?room=r1", ticket).Code }()
	}
	for range limit {
		<-entered
	}
	for _, target := range []string{"/v1/entry?room=r1", "/v1/entry?room=bad.room", "/v1/entry"} {
		rec := f.get(target, ticket)
		if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "overloaded" {
			t.Fatalf("%s at the bound: %d %s, want 503 overloaded", target, rec.Code, rec.Body)
		}
		checkRetryAfter(t, rec)
	}
	if rec := f.get(gslb.TimePath, ""); rec.Code != http.StatusOK {
		t.Errorf("time at the entry bound: %d, want 200 (the bound is the entry's)", rec.Code)
	}
	if got := metricValues(t, f.reg, "danmaku_gslb_entry_inflight"); got[""] != limit {
		t.Errorf("in-flight gauge = %v, want %d", got, limit)
	}
	hold.Store(false)
	close(release)
	for range limit {
		if code := <-done; code != http.StatusOK {
			t.Errorf("held request: %d", code)
		}
	}
	if rec := f.get("/v1/entry?room=r1", ticket); rec.Code != http.StatusOK {
		t.Errorf("after the surge: %d %s", rec.Code, rec.Body)
	}
	if n := metricValues(t, f.reg, "danmaku_gslb_entries_total")["code=overloaded,status=503"]; n != 3 {
		t.Errorf("entries{overloaded} = %v, want 3", n)
	}
}

// A table older than the allocator's MaxAge is not used: 503 table_stale,
// until a sync succeeds.
func TestEntryTableStale(t *testing.T) {
	flaky := &flakyTable{Table: loadtable.NewMemoryTable()}
	f := newEntryFixtureWith(t, true, gslb.AllocatorConfig{Table: flaky, MaxAge: time.Second}, gslb.ServerConfig{}, healthyNodes()...)
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	for _, step := range []struct {
		name    string
		advance time.Duration
		broken  bool
		status  int
		code    string
	}{
		{"fresh", 0, false, 200, ""},
		{"failed sync, table young", 900 * time.Millisecond, true, 200, ""},
		{"failed sync, table too old", 200 * time.Millisecond, true, 503, "table_stale"},
		{"table back", 0, false, 200, ""},
	} {
		f.clk.Advance(step.advance)
		flaky.broken.Store(step.broken)
		f.report(t, healthyNodes()...)
		_ = f.alloc.SyncOnce(context.Background())
		rec := f.get("/v1/entry?room=r1", ticket)
		if rec.Code != step.status || (step.code != "" && errorCode(t, rec) != step.code) {
			t.Fatalf("%s: %d %s, want %d %s", step.name, rec.Code, rec.Body, step.status, step.code)
		}
		if step.status == 503 {
			checkRetryAfter(t, rec)
		}
	}
	got := metricValues(t, f.reg, "danmaku_gslb_entries_total")
	if got["code=table_stale,status=503"] != 1 || got["code=ok,status=200"] != 3 {
		t.Errorf("entries = %v", got)
	}
}

// The server registers the allocator's metrics next to its own.
func TestEntryMetrics(t *testing.T) {
	f := newEntryFixture(t, true, append(healthyNodes(), loadtable.NodeLoad{ID: "gone", Kind: loadtable.KindEdge, Addr: "ws://gone", At: time.Unix(0, 0)})...)
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	for range 3 {
		if rec := f.get("/v1/entry?room=r1", ticket); rec.Code != 200 {
			t.Fatal(rec.Code, rec.Body)
		}
	}
	f.get("/v1/entry?room=r1", "")
	f.clk.Advance(250 * time.Millisecond)
	for name, want := range map[string]map[string]float64{
		// overloaded is there from the start, so that a rate() of it works.
		"danmaku_gslb_entries_total":     {"code=ok,status=200": 3, "code=no_ticket,status=401": 1, "code=overloaded,status=503": 0},
		"danmaku_gslb_allocations_total": {"line=bgp": 3},
		"danmaku_gslb_table_age_seconds": {"": 0.25},
		"danmaku_gslb_sync_errors_total": {"": 0},
		"danmaku_gslb_entry_inflight":    {"": 0},
	} {
		if got := metricValues(t, f.reg, name); !maps.Equal(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	nodes := metricValues(t, f.reg, "danmaku_gslb_nodes")
	if nodes["kind=edge,state=healthy"] != 3 || nodes["kind=edge,state=stale"] != 1 || nodes["kind=ingest,state=healthy"] != 3 {
		t.Errorf("nodes = %v", nodes)
	}
	if got := metricValues(t, f.reg, "danmaku_gslb_sync_duration_seconds"); got[""] != 1 {
		t.Errorf("sync duration observations = %v, want 1", got)
	}
	rec := f.get("/metrics", "")
	for _, name := range []string{"danmaku_gslb_entries_total", "danmaku_gslb_allocations_total", "danmaku_gslb_table_age_seconds", "danmaku_gslb_sync_duration_seconds_bucket"} {
		if !strings.Contains(rec.Body.String(), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// A ticket that verifies but breaks an identity rule is the login service's
// to fix: 400 bad_ticket_claim naming the claim, not a 401 to retry.
func TestEntryBadTicketClaim(t *testing.T) {
	f := newEntryFixture(t, true, healthyNodes()...)
	for _, tc := range []struct {
		name, user string
		tk         auth.Ticket
		claim      string
	}{
		{"control character in sub", "u\x00", auth.Ticket{}, `"sub"`},
		{"avatar not a code or URL", "u1", auth.Ticket{Avatar: "javascript:alert(1)"}, `"av"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.get("/v1/entry?room=r1", mintTicket(t, ticketKey, tc.user, tc.tk, time.Hour))
			if rec.Code != http.StatusBadRequest || errorCode(t, rec) != "bad_ticket_claim" {
				t.Fatalf("%d %s, want 400 bad_ticket_claim", rec.Code, rec.Body)
			}
			var b errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || !strings.Contains(b.Error.Message, tc.claim) {
				t.Errorf("message %s does not name %s", rec.Body, tc.claim)
			}
		})
	}
}

// FuzzEntry: whatever the query and headers, the entry answers 200 or a
// coded 4xx/503 — never a 500, never an uncoded body.
func FuzzEntry(f *testing.F) {
	fx := newEntryFixture(f, true, healthyNodes()...)
	good := mintTicket(f, ticketKey, "u1", auth.Ticket{Nick: "Ann"}, time.Hour)
	for _, seed := range []struct{ query, auth, xff string }{
		{"room=r1", "Bearer " + good, ""},
		{"room=r1&ticket=" + good, "", ""},
		{"room=r1&room=r2", "Bearer " + good, "10.0.0.1"},
		{"room=%zz&ticket=%", "", ""},
		{"room=" + strings.Repeat("r", 65), "Bearer " + good, ""},
		{"room=r1", "Bearer " + strings.Repeat("A", 64<<10), ""},
		{"room=r1", "Bearer " + good[:len(good)/2], ""},
		{"room=r1", "Bearer a.b.c", ""},
		{"room=r1", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1MSJ9.", ""},
		{"room=r1", "bearer " + good, "not an ip, ::1, 999.1.1.1"},
		{"room=r%00", "Basic Zm9vOmJhcg==", ""},
		{";;&&==", "Bearer ", "\x00\xff"},
		{"room=r1&ticket=" + strings.Repeat("x.", 3000), "", ""},
	} {
		f.Add(seed.query, seed.auth, seed.xff)
	}
	f.Fuzz(func(t *testing.T, query, authz, xff string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/entry", nil)
		req.URL.RawQuery = query
		req.Header["Authorization"] = []string{authz}
		req.Header["X-Forwarded-For"] = []string{xff}
		rec := httptest.NewRecorder()
		fx.engine.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var e gslb.Entry
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Token == "" {
				t.Fatalf("200 with body %q", rec.Body)
			}
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable:
			errorCode(t, rec)
		default:
			t.Fatalf("status %d for query %q auth %q: %s", rec.Code, query, authz, rec.Body)
		}
	})
}

// BenchmarkEntry measures a whole entry (ticket verified, addresses chosen,
// token signed, JSON written) through the gin engine: what one admitted
// request costs, which sizes ServerConfig.MaxInFlight.
func BenchmarkEntry(b *testing.B) {
	f := newEntryFixtureWith(b, true, gslb.AllocatorConfig{}, gslb.ServerConfig{MaxInFlight: 1 << 20}, healthyNodes()...)
	ticket := mintTicket(b, ticketKey, "u1", auth.Ticket{Nick: "Ann"}, time.Hour)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if rec := f.get("/v1/entry?room=r1", ticket); rec.Code != http.StatusOK {
				b.Errorf("%d %s", rec.Code, rec.Body)
				return
			}
		}
	})
}
