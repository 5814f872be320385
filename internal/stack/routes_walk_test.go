package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"danmaku/auth"
	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/loadtable"
	"danmaku/internal/objstore"
	"danmaku/internal/ratelimit"
	"danmaku/internal/rules"
	"danmaku/internal/stream"
	"danmaku/internal/testwait"
	"danmaku/sdk/wire"
	"danmaku/slicer"
)

// The cases live here, in Go, rather than being parsed out of docs/api.md:
// most rows need a credential made at run time (an entry's token, a token
// signed for another node or an unknown epoch), a body, or a state set up
// first (a lottery, an ended event, a held connection), which a Markdown
// cell could only name. TestAPIDocListsEveryAnswer keeps the two in step:
// the table in docs/api.md and walkCases have exactly the same rows, and
// agree on which of them the walk provokes.

// answer is one row of the table: a role's route and one non-success
// answer of it. route is "METHOD /path" as gin names it, or "*" for any
// path (and any method) of the role.
type answer struct {
	role, route string
	status      int
	code        string
}

func (a answer) String() string { return fmt.Sprintf("%s %s %d %s", a.role, a.route, a.status, a.code) }

// probe is one request. auth names a credential of the walk (walk.creds),
// sent as "Authorization: Bearer".
type probe struct {
	method, path string
	auth         string
	body         string
	header       map[string]string
}

type walkCase struct {
	answer
	// notWalked, when set, says why the walk does not provoke the answer
	// and, after the last "; ", where it is provoked instead.
	notWalked string
	req       probe
	// tries sends req that many times, all at once, and takes the
	// answer looked for if one of them got it: a rate limit, whose bucket
	// the requests empty together faster than it refills however slow
	// each is on a loaded machine (one after the other, slower than the
	// refill, they never emptied a bucket of 20 refilling at 5/s).
	tries int
	// pause, when set, repeats req pause apart until the answer comes (a
	// manifest not written yet, a load report not synced yet):
	// testwait.Limit at most, a guard against a hung wait, not a bound.
	pause time.Duration
	// before runs once, just before the case.
	before func(t *testing.T, w *walk)
	// fault takes the stack's backends down (faults) for the case.
	fault bool
	// on names another stack of the walk for the case (walk.other): ""
	// is the main one.
	on string
	// check, when set, checks more of the answer than the walk does for
	// every case.
	check func(t *testing.T, resp *http.Response, body []byte)
}

// The walk's other stacks, each started at its first case.
const (
	// stackUnloaded's events store never lists: its roles never load the
	// events.
	stackUnloaded = "unloaded"
	// stackCrowded's edge takes one new connection an hour.
	stackCrowded = "crowded"
	// stackFull's edge takes one connection.
	stackFull = "full"
	// stackLimited runs limitedRules: the walk comes from loopback, which
	// the built-in rules allowlist, so their 429s need rules of its own.
	stackLimited = "limited"
)

// limitedRules admit one request per client address an hour on each
// limited prefix, and allowlist nothing: a route's second request is
// refused, whatever it holds. Both algorithms answer alike; the walk uses
// each.
func limitedRules() *ratelimit.Rules {
	rule := func(name, route, algorithm string) ratelimit.Rule {
		return ratelimit.Rule{Name: name, Route: route, Key: ratelimit.KeyIP, Algorithm: algorithm, Limit: 1, Per: "1h"}
	}
	return &ratelimit.Rules{Rules: []ratelimit.Rule{
		rule("walk-entry", "GET /v1/entry", ratelimit.AlgorithmLocal),
		rule("walk-time", "GET /v1/time", ratelimit.AlgorithmLocal),
		rule("walk-upload", "POST /v1/rooms/*", ratelimit.AlgorithmLocal),
		rule("walk-gifts", "POST /v1/gifts", ratelimit.AlgorithmWindow),
		rule("walk-admin", "/v1/admin/*", ratelimit.AlgorithmWindow),
		rule("walk-ws", "GET /v1/ws", ratelimit.AlgorithmLocal),
	}}
}

// rowAll is the role of a row that holds for every role.
const rowAll = "all"

var wsUpgrade = map[string]string{
	"Connection": "Upgrade", "Upgrade": "websocket",
	"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}

func withHeaders(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// walkCases is every non-success answer of every route, in the order the
// walk sends them (a few depend on state set up by an earlier one).
func walkCases() []walkCase {
	var cs []walkCase
	// add appends a case; what it returns is valid until the next add.
	add := func(role, route string, status int, code string, req probe) *walkCase {
		cs = append(cs, walkCase{answer: answer{role, route, status, code}, req: req})
		return &cs[len(cs)-1]
	}
	not := func(role, route string, status int, code, why string) {
		cs = append(cs, walkCase{answer: answer{role, route, status, code}, notWalked: why})
	}
	// down is the answer of a route while its backend is down.
	down := func(role, route string, status int, code string, req probe) {
		add(role, route, status, code, req).fault = true
	}
	// unloaded is the answer of a route while the events are not loaded.
	unloaded := func(role, route string, req probe) {
		add(role, route, 503, "events_unavailable", req).on = stackUnloaded
	}
	// limited is a route's 429 over a rate-limit rule, on stackLimited:
	// its first request spends the rule's budget (an earlier case on the
	// same rule may have), its second is refused before anything else is
	// read, credential or body.
	limited := func(role, route, rule string) {
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer(":room", "demo", ":user", "spammer", ":id", "draw-1", ":action", "dismiss").Replace(path)
		c := add(role, route, 429, "rate_limited", probe{method: method, path: path})
		c.on, c.tries = stackLimited, 2
		c.check = func(t *testing.T, resp *http.Response, body []byte) {
			t.Helper()
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("Retry-After %q, want whole seconds, at least 1", resp.Header.Get("Retry-After"))
			}
			if !strings.Contains(string(body), `\"`+rule+`\"`) {
				t.Errorf("the message does not name the rule %q: %s", rule, body)
			}
		}
	}
	// JSON bodies: the same three answers on every route that reads one.
	bodies := func(role, route string, limit int, auth string) {
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer(":room", "demo", ":user", "spammer", ":id", "walk-later", ":action", "dismiss").Replace(path)
		add(role, route, 400, "bad_json", probe{method: method, path: path, auth: auth, body: `{"text":`})
		add(role, route, 400, "bad_utf8", probe{method: method, path: path, auth: auth, body: "{\"text\":\"\xff\"}"})
		// As curl sends a large body: the 413 must come instead of
		// "100 Continue" (send checks), not after it.
		add(role, route, 413, "body_too_large", probe{method: method, path: path, auth: auth, body: `{"text":"` + strings.Repeat("x", limit) + `"}`,
			header: map[string]string{"Expect": "100-continue"}})
	}
	now := time.Now().UTC()
	eventBody := func(id string, rooms ...string) string {
		e := event.Event{ID: id, Start: now.Add(-time.Minute), End: now.Add(time.Hour)}
		for _, r := range rooms {
			e.Rooms = append(e.Rooms, event.Room{ID: r})
		}
		b, _ := json.Marshal(e)
		return string(b)
	}

	// Every role.
	for _, role := range []string{RoleGSLB, RoleIngest, RoleEdge, RoleSlicer} {
		add(role, "*", 404, "not_found", probe{method: "GET", path: "/v1/entry/?ticket=SECRET&token=SECRET"})
	}
	for _, role := range AllRoles {
		add(role, "*", 405, "method_not_allowed", probe{method: "DELETE", path: "/healthz"})
	}
	preflight := map[string]string{"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"}
	add(RoleGSLB, "*", 403, "forbidden", probe{method: "OPTIONS", path: "/v1/entry", header: preflight})
	add(RoleIngest, "*", 403, "forbidden", probe{method: "OPTIONS", path: "/v1/rooms/demo/barrage", header: preflight})
	// Browsers never call gifts or the operator APIs: no origin is granted
	// them (TestCORS in internal/httpx: an allowed one neither).
	add(RoleGSLB, "*", 403, "cors_not_allowed", probe{method: "OPTIONS", path: "/v1/admin/events", header: preflight})
	add(RoleIngest, "*", 403, "cors_not_allowed", probe{method: "OPTIONS", path: "/v1/gifts", header: preflight})
	add(RoleEdge, "*", 400, "body_not_allowed", probe{method: "GET", path: "/healthz", body: `{"x":1}`})
	add(RoleOrigin, "*", 400, "body_not_allowed", probe{method: "GET", path: "/healthz", body: `{"x":1}`})
	for _, role := range []string{RoleGSLB, RoleIngest, RoleSlicer} {
		not(role, "*", 408, "body_timeout", "a body that stops arriving for the read timeout; TestSlowBodies and httpx tests")
	}
	not(rowAll, "*", 500, "internal", "a handler panicked (a bug); httpx tests")
	for _, role := range []string{RoleGSLB, RoleIngest, RoleEdge} {
		why := "the token keys not loaded yet; httpx tests"
		if role == RoleEdge {
			why = "the token keys not loaded yet, or the node draining; httpx and edge tests"
		}
		not(role, "GET /healthz", 503, "unavailable", why)
	}

	// gslb: entry.
	const entry = "GET /v1/entry"
	add(RoleGSLB, entry, 400, "bad_room", probe{method: "GET", path: "/v1/entry?room=a.b", auth: "ticket"})
	add(RoleGSLB, entry, 404, "no_such_room", probe{method: "GET", path: "/v1/entry?room=nosuch", auth: "ticket"})
	add(RoleGSLB, entry, 409, "room_not_live", probe{method: "GET", path: "/v1/entry?room=later", auth: "ticket"})
	unloaded(RoleGSLB, entry, probe{method: "GET", path: "/v1/entry?room=demo", auth: "ticket"})
	add(RoleGSLB, entry, 401, "no_ticket", probe{method: "GET", path: "/v1/entry?room=demo"})
	add(RoleGSLB, entry, 401, "bad_ticket", probe{method: "GET", path: "/v1/entry?room=demo", auth: "junk"})
	add(RoleGSLB, entry, 400, "bad_ticket_claim", probe{method: "GET", path: "/v1/entry?room=demo", auth: "badClaimTicket"})
	add(RoleGSLB, entry, 400, "ticket_in_query", probe{method: "GET", path: "/v1/entry?room=demo&ticket=SECRET"})
	add(RoleGSLB, entry, 400, "bad_protocol", probe{method: "GET", path: "/v1/entry?room=demo&proto=02"})
	not(RoleGSLB, entry, 426, "protocol_unsupported", "a stack serving only newer protocols; gslb TestEntryProtocol")
	add(RoleGSLB, entry, 401, "ticket_lifetime", probe{method: "GET", path: "/v1/entry?room=demo", auth: "longTicket"})
	add(RoleGSLB, entry, 403, "ticket_scope", probe{method: "GET", path: "/v1/entry?room=demo", auth: "elsewhereTicket"})
	add(RoleGSLB, entry, 403, "ticket_scope_required", probe{method: "GET", path: "/v1/entry?room=paid", auth: "ticket"})
	add(RoleGSLB, entry, 403, "banned", probe{method: "GET", path: "/v1/entry?room=demo", auth: "bannedTicket"})
	not(RoleGSLB, entry, 503, "overloaded", "more entries in flight than MaxInFlight; gslb tests")
	not(RoleGSLB, entry, 503, "table_stale", "the load table unreadable for MaxAge; gslb tests")
	not(RoleGSLB, entry, 400, "token_too_large", "too many node addresses (a configuration fault); gslb tests")
	not(RoleGSLB, entry, 503, "token_unavailable", "the token keys not loaded yet; gslb tests")

	// gslb, dev only: tickets and the demo page.
	const ticket = "GET /v1/dev/ticket"
	add(RoleGSLB, ticket, 400, "bad_user", probe{method: "GET", path: "/v1/dev/ticket?user=a%20b"})
	add(RoleGSLB, ticket, 400, "bad_nick", probe{method: "GET", path: "/v1/dev/ticket?user=a&nick=" + strings.Repeat("n", 129)})
	add(RoleGSLB, ticket, 400, "bad_avatar", probe{method: "GET", path: "/v1/dev/ticket?user=a&av=http://img.example/a.png"})
	add(RoleGSLB, ticket, 400, "bad_role", probe{method: "GET", path: "/v1/dev/ticket?user=a&role=king"})
	not(RoleGSLB, ticket, 500, "internal", "the ticket cannot be signed; a bug, not provoked by any test")
	add(RoleGSLB, "GET /sdk/*file", 404, "not_found", probe{method: "GET", path: "/sdk/nope.js"})
	// The demo page ignores Range (the whole file, never a 416).
	add(RoleGSLB, "GET /", 412, "precondition_failed", probe{method: "GET", path: "/", header: map[string]string{"If-Match": `"stale"`}})
	add(RoleGSLB, "GET /sdk/*file", 412, "precondition_failed", probe{method: "GET", path: "/sdk/danmaku.js", header: map[string]string{"If-Match": `"stale"`}})

	// gslb: events API.
	for _, route := range []string{"GET /v1/admin/events", "POST /v1/admin/events", "GET /v1/admin/events/:id",
		"PUT /v1/admin/events/:id", "POST /v1/admin/events/:id/end", "DELETE /v1/admin/events/:id"} {
		method, path, _ := strings.Cut(route, " ")
		add(RoleGSLB, route, 401, "bad_operator_key", probe{method: method, path: strings.Replace(path, ":id", "demo", 1), auth: "junk"})
	}
	bodies(RoleGSLB, "POST /v1/admin/events", 1<<20, "op")
	add(RoleGSLB, "POST /v1/admin/events", 400, "bad_event", probe{method: "POST", path: "/v1/admin/events", auth: "op", body: `{"id":"x"}`})
	add(RoleGSLB, "POST /v1/admin/events", 409, "event_exists", probe{method: "POST", path: "/v1/admin/events", auth: "op", body: eventBody("demo", "fresh")})
	add(RoleGSLB, "POST /v1/admin/events", 409, "room_taken", probe{method: "POST", path: "/v1/admin/events", auth: "op", body: eventBody("other", "demo")})
	add(RoleGSLB, "GET /v1/admin/events/:id", 404, "no_such_event", probe{method: "GET", path: "/v1/admin/events/nope", auth: "op"})
	bodies(RoleGSLB, "PUT /v1/admin/events/:id", 1<<20, "op")
	add(RoleGSLB, "PUT /v1/admin/events/:id", 400, "bad_event", probe{method: "PUT", path: "/v1/admin/events/walk-later", auth: "op", body: eventBody("another-id", "later")})
	add(RoleGSLB, "PUT /v1/admin/events/:id", 404, "no_such_event", probe{method: "PUT", path: "/v1/admin/events/nope", auth: "op", body: eventBody("nope", "nope")})
	add(RoleGSLB, "PUT /v1/admin/events/:id", 409, "event_ended", probe{method: "PUT", path: "/v1/admin/events/walk-ended", auth: "op", body: eventBody("walk-ended", "ended")})
	add(RoleGSLB, "PUT /v1/admin/events/:id", 409, "room_taken", probe{method: "PUT", path: "/v1/admin/events/walk-later", auth: "op", body: eventBody("walk-later", "later", "demo")})
	add(RoleGSLB, "POST /v1/admin/events/:id/end", 404, "no_such_event", probe{method: "POST", path: "/v1/admin/events/nope/end", auth: "op"})
	add(RoleGSLB, "DELETE /v1/admin/events/:id", 404, "no_such_event", probe{method: "DELETE", path: "/v1/admin/events/nope", auth: "op"})
	add(RoleGSLB, "DELETE /v1/admin/events/:id", 409, "event_not_ended", probe{method: "DELETE", path: "/v1/admin/events/demo", auth: "op"})
	for _, route := range []string{"GET /v1/admin/events", "POST /v1/admin/events", "GET /v1/admin/events/:id",
		"PUT /v1/admin/events/:id", "POST /v1/admin/events/:id/end", "DELETE /v1/admin/events/:id"} {
		method, path, _ := strings.Cut(route, " ")
		down(RoleGSLB, route, 503, "backend_unavailable", probe{method: method, path: strings.Replace(path, ":id", "walk-later", 1), auth: "op", body: eventBody("walk-later", "later")})
	}

	// ingest: barrage and announcements, with a dynamic token.
	for _, route := range []string{"POST /v1/rooms/:room/barrage", "POST /v1/rooms/:room/announce"} {
		method, tmpl, _ := strings.Cut(route, " ")
		path := func(room string) string { return strings.Replace(tmpl, ":room", room, 1) }
		text := `{"text":"hello"}`
		add(RoleIngest, route, 401, "no_token", probe{method: method, path: path("demo"), body: text})
		add(RoleIngest, route, 401, "bad_token", probe{method: method, path: path("demo"), auth: "junk", body: text})
		add(RoleIngest, route, 401, "token_epoch", probe{method: method, path: path("demo"), auth: "futureEpoch", body: text})
		add(RoleIngest, route, 403, "wrong_node", probe{method: method, path: path("demo"), auth: "otherNode", body: text})
		add(RoleIngest, route, 403, "wrong_room", probe{method: method, path: path("elsewhere"), auth: "viewer", body: text})
		auth := "hostNosuch"
		if route == "POST /v1/rooms/:room/announce" {
			auth = "op" // an announcement key names the room in the path
			add(RoleIngest, route, 403, "forbidden", probe{method: method, path: path("demo"), auth: "viewer", body: text})
			add(RoleIngest, route, 400, "bad_room", probe{method: method, path: path("a.b"), auth: "op", body: text})
		}
		add(RoleIngest, route, 404, "no_such_room", probe{method: method, path: path("nosuch"), auth: auth, body: text})
		add(RoleIngest, route, 409, "room_not_live", probe{method: method, path: path("later"), auth: strings.Replace(auth, "Nosuch", "Later", 1), body: text})
		unloaded(RoleIngest, route, probe{method: method, path: path("demo"), auth: "host", body: text})
		bodyAuth := "host"
		bodies(RoleIngest, route, 4<<10, bodyAuth)
		add(RoleIngest, route, 400, "missing_field", probe{method: method, path: path("demo"), auth: bodyAuth, body: `{}`})
		add(RoleIngest, route, 400, "empty_text", probe{method: method, path: path("demo"), auth: bodyAuth, body: `{"text":" \u200b "}`})
		add(RoleIngest, route, 400, "text_too_long", probe{method: method, path: path("demo"), auth: bodyAuth, body: `{"text":"` + strings.Repeat("长", 61) + `"}`})
		add(RoleIngest, route, 400, "bad_playhead", probe{method: method, path: path("demo"), auth: bodyAuth, body: `{"text":"hi","playhead_ms":0}`})
		// The walk runs on the real clock: a playhead a day ahead or a
		// day behind is outside the bounds whatever the machine's load.
		add(RoleIngest, route, 400, "playhead_future", probe{method: method, path: path("demo"), auth: bodyAuth, body: fmt.Sprintf(`{"text":"hi","playhead_ms":%d}`, time.Now().Add(24*time.Hour).UnixMilli())})
		add(RoleIngest, route, 400, "playhead_too_old", probe{method: method, path: path("demo"), auth: bodyAuth, body: fmt.Sprintf(`{"text":"hi","playhead_ms":%d}`, time.Now().Add(-24*time.Hour).UnixMilli())})
	}
	// A lottery entry while the lottery store is down; an announcement
	// while the fast lane is.
	down(RoleIngest, "POST /v1/rooms/:room/barrage", 503, "backend_unavailable", probe{method: "POST", path: "/v1/rooms/demo/barrage", auth: "viewer", body: `{"text":"draw"}`})
	down(RoleIngest, "POST /v1/rooms/:room/announce", 503, "backend_unavailable", probe{method: "POST", path: "/v1/rooms/demo/announce", auth: "host", body: `{"text":"news"}`})
	add(RoleIngest, "POST /v1/rooms/:room/barrage", 422, "sensitive_word", probe{method: "POST", path: "/v1/rooms/strict/barrage", auth: "strictViewer", body: `{"text":"a forbidden word"}`})
	c := add(RoleIngest, "POST /v1/rooms/:room/announce", 429, "fast_lane_full", probe{method: "POST", path: "/v1/rooms/lane/announce", auth: "op", body: `{"text":"news"}`})
	c.tries = 20
	// Last of the barrage rows: it makes a second ingest node look live,
	// which the gslb would hand out from then on.
	c = add(RoleIngest, "POST /v1/rooms/:room/barrage", 421, "not_primary", probe{method: "POST", path: "/v1/rooms/demo/barrage", auth: "fallback", body: `{"text":"hello"}`})
	c.pause = 100 * time.Millisecond
	c.before = func(t *testing.T, w *walk) { w.ghostIngest(t) }

	// ingest: gifts, with a service key.
	const gifts = "POST /v1/gifts"
	gift := func(room, user string) string {
		b, _ := json.Marshal(map[string]any{"order_id": "o-1", "room": room, "user": user, "gift": "rose", "value": 1})
		return string(b)
	}
	add(RoleIngest, gifts, 401, "bad_service_key", probe{method: "POST", path: "/v1/gifts", auth: "junk", body: gift("demo", "bob")})
	bodies(RoleIngest, gifts, 4<<10, "op")
	add(RoleIngest, gifts, 400, "bad_field", probe{method: "POST", path: "/v1/gifts", auth: "op", body: gift("demo", "bob\u0000")})
	add(RoleIngest, gifts, 404, "no_such_room", probe{method: "POST", path: "/v1/gifts", auth: "op", body: gift("nosuch", "bob")})
	add(RoleIngest, gifts, 409, "room_not_live", probe{method: "POST", path: "/v1/gifts", auth: "op", body: gift("later", "bob")})
	c = add(RoleIngest, gifts, 409, "order_conflict", probe{method: "POST", path: "/v1/gifts", auth: "op", body: `{"order_id":"o-reused","room":"demo","user":"alice","gift":"rose","value":1}`})
	c.before = func(t *testing.T, w *walk) {
		// The order as first sent: bob's.
		w.op(t, "POST", RoleIngest, "/v1/gifts", `{"order_id":"o-reused","room":"demo","user":"bob","gift":"rose","value":1}`, http.StatusOK)
	}
	c = add(RoleIngest, gifts, 429, "gift_backlog", probe{method: "POST", path: "/v1/gifts", auth: "op", body: gift("lane", "bob")})
	c.before = func(t *testing.T, w *walk) {
		// As a slicer leader far behind on the room's gifts would.
		if err := w.backlog.Set(context.Background(), "lane", 3600, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	unloaded(RoleIngest, gifts, probe{method: "POST", path: "/v1/gifts", auth: "op", body: gift("demo", "bob")})
	down(RoleIngest, gifts, 503, "backend_unavailable", probe{method: "POST", path: "/v1/gifts", auth: "op", body: gift("demo", "bob")})

	// ingest: lotteries (an operator key, or a host's token of the room).
	lotteryRoutes := []string{"POST /v1/admin/rooms/:room/lotteries", "GET /v1/admin/rooms/:room/lotteries",
		"GET /v1/admin/rooms/:room/lotteries/:id", "POST /v1/admin/rooms/:room/lotteries/:id/stop",
		"GET /v1/admin/rooms/:room/lotteries/:id/entrants"}
	for _, route := range lotteryRoutes {
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer(":room", "demo", ":id", "draw-1").Replace(path)
		add(RoleIngest, route, 401, "bad_operator_key", probe{method: method, path: path, auth: "junk", body: `{}`})
		add(RoleIngest, route, 403, "wrong_node", probe{method: method, path: path, auth: "otherNode", body: `{}`})
		add(RoleIngest, route, 403, "forbidden", probe{method: method, path: path, auth: "viewer", body: `{}`})
	}
	const lotteries = "POST /v1/admin/rooms/:room/lotteries"
	bodies(RoleIngest, lotteries, 4<<10, "op")
	add(RoleIngest, lotteries, 400, "bad_lottery", probe{method: "POST", path: "/v1/admin/rooms/demo/lotteries", auth: "op", body: `{"id":"x","keyword":"k"}`})
	add(RoleIngest, lotteries, 409, "lottery_exists", probe{method: "POST", path: "/v1/admin/rooms/demo/lotteries", auth: "op", body: `{"id":"draw-1","keyword":"another","duration_seconds":60}`})
	add(RoleIngest, "GET /v1/admin/rooms/:room/lotteries/:id", 404, "no_such_lottery", probe{method: "GET", path: "/v1/admin/rooms/demo/lotteries/nope", auth: "op"})
	add(RoleIngest, "POST /v1/admin/rooms/:room/lotteries/:id/stop", 404, "no_such_lottery", probe{method: "POST", path: "/v1/admin/rooms/demo/lotteries/nope/stop", auth: "op"})
	const entrants = "GET /v1/admin/rooms/:room/lotteries/:id/entrants"
	add(RoleIngest, entrants, 400, "bad_cursor", probe{method: "GET", path: "/v1/admin/rooms/demo/lotteries/draw-1/entrants?cursor=x", auth: "op"})
	add(RoleIngest, entrants, 400, "bad_count", probe{method: "GET", path: "/v1/admin/rooms/demo/lotteries/draw-1/entrants?count=0", auth: "op"})
	add(RoleIngest, entrants, 404, "no_such_lottery", probe{method: "GET", path: "/v1/admin/rooms/demo/lotteries/nope/entrants", auth: "op"})
	for _, route := range lotteryRoutes {
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer(":room", "demo", ":id", "draw-1").Replace(path)
		down(RoleIngest, route, 503, "backend_unavailable", probe{method: method, path: path, auth: "op", body: `{"id":"draw-2","keyword":"k","duration_seconds":60}`})
	}

	// ingest: a viewer's reports, with a dynamic token.
	const reports = "POST /v1/rooms/:room/reports"
	report := func(id string) string { return `{"id":"` + id + `","k":1,"reason":"spam"}` }
	add(RoleIngest, reports, 401, "no_token", probe{method: "POST", path: "/v1/rooms/demo/reports", body: report("1000-0")})
	add(RoleIngest, reports, 401, "bad_token", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "junk", body: report("1000-0")})
	add(RoleIngest, reports, 401, "token_epoch", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "futureEpoch", body: report("1000-0")})
	add(RoleIngest, reports, 403, "wrong_node", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "otherNode", body: report("1000-0")})
	add(RoleIngest, reports, 403, "wrong_room", probe{method: "POST", path: "/v1/rooms/elsewhere/reports", auth: "viewer", body: report("1000-0")})
	add(RoleIngest, reports, 404, "no_such_room", probe{method: "POST", path: "/v1/rooms/nosuch/reports", auth: "hostNosuch", body: report("1000-0")})
	add(RoleIngest, reports, 409, "room_not_live", probe{method: "POST", path: "/v1/rooms/later/reports", auth: "hostLater", body: report("1000-0")})
	unloaded(RoleIngest, reports, probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "host", body: report("1000-0")})
	bodies(RoleIngest, reports, 4<<10, "viewer")
	add(RoleIngest, reports, 400, "bad_report", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "viewer", body: `{"id":"1000-0","k":1,"reason":"boring"}`})
	down(RoleIngest, reports, 503, "backend_unavailable", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "viewer", body: report("1001-0")})
	// The reporter's allowance (5 at once) runs out: the same report
	// again counts against it too.
	c = add(RoleIngest, reports, 429, "report_rate", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "reporter", body: report("1000-0")})
	c.tries = 10
	c = add(RoleIngest, reports, 421, "not_primary", probe{method: "POST", path: "/v1/rooms/demo/reports", auth: "fallback", body: report("1000-0")})
	c.pause = 100 * time.Millisecond // until the ghost's load report is synced
	c.before = func(t *testing.T, w *walk) { w.ghostIngest(t) }

	// ingest: the review queue (an operator key, or a host's token of the
	// room). The walk's set-up reported message 1000-0, whose sender the
	// stream never held.
	reviewRoutes := []string{"GET /v1/admin/rooms/:room/reports", "POST /v1/admin/rooms/:room/reports/:id/:action"}
	reviewPath := func(route string) (string, string) {
		method, path, _ := strings.Cut(route, " ")
		return method, strings.NewReplacer(":room", "demo", ":id", "1000-0", ":action", "dismiss").Replace(path)
	}
	for _, route := range reviewRoutes {
		method, path := reviewPath(route)
		add(RoleIngest, route, 401, "bad_operator_key", probe{method: method, path: path, auth: "junk"})
		add(RoleIngest, route, 403, "wrong_node", probe{method: method, path: path, auth: "otherNode"})
		add(RoleIngest, route, 403, "forbidden", probe{method: method, path: path, auth: "viewer"})
	}
	const reviewList, review = "GET /v1/admin/rooms/:room/reports", "POST /v1/admin/rooms/:room/reports/:id/:action"
	add(RoleIngest, reviewList, 400, "bad_room", probe{method: "GET", path: "/v1/admin/rooms/a.b/reports", auth: "op"})
	add(RoleIngest, reviewList, 400, "bad_count", probe{method: "GET", path: "/v1/admin/rooms/demo/reports?n=0", auth: "op"})
	bodies(RoleIngest, review, 4<<10, "op")
	add(RoleIngest, review, 400, "bad_report", probe{method: "POST", path: "/v1/admin/rooms/demo/reports/yesterday/dismiss", auth: "op"})
	add(RoleIngest, review, 400, "bad_ban", probe{method: "POST", path: "/v1/admin/rooms/demo/reports/1000-0/ban", auth: "op", body: `{"ttl_seconds":-1}`})
	add(RoleIngest, review, 400, "bad_takedown", probe{method: "POST", path: "/v1/admin/rooms/demo/reports/1000-0/takedown", auth: "op", body: `{"reason":"` + strings.Repeat("x", 300) + `"}`})
	add(RoleIngest, review, 404, "not_found", probe{method: "POST", path: "/v1/admin/rooms/demo/reports/1000-0/shrug", auth: "op"})
	add(RoleIngest, review, 404, "no_such_report", probe{method: "POST", path: "/v1/admin/rooms/demo/reports/2000-0/dismiss", auth: "op"})
	add(RoleIngest, review, 409, "sender_unknown", probe{method: "POST", path: "/v1/admin/rooms/demo/reports/1000-0/ban", auth: "op"})
	not(RoleIngest, review, 404, "no_such_room", "a takedown in a room whose event was deleted since its reports; takedown tests")
	not(RoleIngest, review, 409, "room_not_live", "a takedown in a room whose event ended since its reports; takedown tests")
	not(RoleIngest, review, 507, "takedowns_full", "a takedown in a room holding 10,000; takedown tests")
	not(RoleIngest, review, 501, "takedown_unavailable", "a review API without a takedown function, which no stack builds; ingest tests (TestReviewTakedownUnavailable)")
	for _, route := range reviewRoutes {
		method, path := reviewPath(route)
		down(RoleIngest, route, 503, "backend_unavailable", probe{method: method, path: path, auth: "op"})
	}
	// ingest: takedowns (an operator key, or a host's token of the room).
	takedownRoutes := []string{"POST /v1/admin/rooms/:room/takedowns", "GET /v1/admin/rooms/:room/takedowns"}
	const takedowns = "POST /v1/admin/rooms/:room/takedowns"
	for _, route := range takedownRoutes {
		method, path, _ := strings.Cut(route, " ")
		path = strings.Replace(path, ":room", "demo", 1)
		add(RoleIngest, route, 401, "bad_operator_key", probe{method: method, path: path, auth: "junk", body: `{}`})
		add(RoleIngest, route, 403, "wrong_node", probe{method: method, path: path, auth: "otherNode", body: `{}`})
		add(RoleIngest, route, 403, "forbidden", probe{method: method, path: path, auth: "viewer", body: `{}`})
		add(RoleIngest, route, 400, "bad_room", probe{method: method, path: strings.Replace(path, "demo", "a.b", 1), auth: "op", body: `{"id":"1-0","k":1}`})
		down(RoleIngest, route, 503, "backend_unavailable", probe{method: method, path: path, auth: "op", body: `{"id":"1-0","k":1}`})
	}
	bodies(RoleIngest, takedowns, 4<<10, "op")
	add(RoleIngest, takedowns, 400, "bad_takedown", probe{method: "POST", path: "/v1/admin/rooms/demo/takedowns", auth: "op", body: `{"id":"12","k":1}`})
	add(RoleIngest, takedowns, 404, "no_such_room", probe{method: "POST", path: "/v1/admin/rooms/nosuch/takedowns", auth: "op", body: `{"id":"1-0","k":1}`})
	add(RoleIngest, takedowns, 409, "room_not_live", probe{method: "POST", path: "/v1/admin/rooms/later/takedowns", auth: "op", body: `{"id":"1-0","k":1}`})
	not(RoleIngest, takedowns, 507, "takedowns_full", "10,000 takedowns in the room; ingest tests (TestTakeDownFull)")

	// ingest: bans and site-wide broadcasts (an operator key).
	banRoutes := []string{"GET /v1/admin/bans", "GET /v1/admin/bans/:user", "PUT /v1/admin/bans/:user", "DELETE /v1/admin/bans/:user"}
	for _, route := range banRoutes {
		method, path, _ := strings.Cut(route, " ")
		add(RoleIngest, route, 401, "bad_operator_key", probe{method: method, path: strings.Replace(path, ":user", "spammer", 1), auth: "junk"})
	}
	bodies(RoleIngest, "PUT /v1/admin/bans/:user", 4<<10, "op")
	add(RoleIngest, "PUT /v1/admin/bans/:user", 400, "bad_ban", probe{method: "PUT", path: "/v1/admin/bans/spammer", auth: "op", body: `{"ttl_seconds":10000000000}`})
	add(RoleIngest, "DELETE /v1/admin/bans/:user", 400, "bad_ban", probe{method: "DELETE", path: "/v1/admin/bans/spammer?room=a.b", auth: "op"})
	for _, route := range banRoutes {
		method, path, _ := strings.Cut(route, " ")
		down(RoleIngest, route, 503, "backend_unavailable", probe{method: method, path: strings.Replace(path, ":user", "spammer", 1), auth: "op"})
	}
	// ingest: the fleet's rules (an operator key). Nothing is pushed: a
	// pushed rules document would be the walk stack's rules.
	ruleRoutes := []string{"GET /v1/admin/rules/:kind", "PUT /v1/admin/rules/:kind", "GET /v1/admin/rules/:kind/history", "POST /v1/admin/rules/:kind/rollback"}
	for _, route := range ruleRoutes {
		method, path, _ := strings.Cut(route, " ")
		add(RoleIngest, route, 401, "bad_operator_key", probe{method: method, path: strings.Replace(path, ":kind", "words", 1), auth: "junk"})
		add(RoleIngest, route, 404, "unknown_kind", probe{method: method, path: strings.Replace(path, ":kind", "colours", 1), auth: "op"})
	}
	const pushRules = "PUT /v1/admin/rules/:kind"
	add(RoleIngest, pushRules, 400, "bad_words", probe{method: "PUT", path: "/v1/admin/rules/words", auth: "op", body: "fine\n\x01bell\n"})
	add(RoleIngest, pushRules, 400, "bad_rules", probe{method: "PUT", path: "/v1/admin/rules/limits", auth: "op", body: `{"rules":[{"name":"x","route":"*","key":"ip","algorithm":"local","limit":5,"per":"1d"}]}`})
	add(RoleIngest, pushRules, 400, "bad_json", probe{method: "PUT", path: "/v1/admin/rules/limits", auth: "op", body: `{"rules":`})
	add(RoleIngest, pushRules, 400, "bad_utf8", probe{method: "PUT", path: "/v1/admin/rules/limits", auth: "op", body: "{\"rules\":[\xff]}"})
	add(RoleIngest, pushRules, 413, "body_too_large", probe{method: "PUT", path: "/v1/admin/rules/words", auth: "op", body: strings.Repeat("w\n", rules.MaxDocument/2+1)})
	add(RoleIngest, pushRules, 400, "bad_note", probe{method: "PUT", path: "/v1/admin/rules/words?note=%07", auth: "op", body: "ok\n"})
	add(RoleIngest, "GET /v1/admin/rules/:kind", 400, "bad_request", probe{method: "GET", path: "/v1/admin/rules/words?version=x", auth: "op"})
	add(RoleIngest, "GET /v1/admin/rules/:kind/history", 400, "bad_request", probe{method: "GET", path: "/v1/admin/rules/words/history?n=0", auth: "op"})
	add(RoleIngest, "POST /v1/admin/rules/:kind/rollback", 400, "bad_request", probe{method: "POST", path: "/v1/admin/rules/words/rollback?to=-1", auth: "op"})
	add(RoleIngest, "POST /v1/admin/rules/:kind/rollback", 400, "bad_note", probe{method: "POST", path: "/v1/admin/rules/words/rollback?note=%07", auth: "op"})
	add(RoleIngest, "GET /v1/admin/rules/:kind", 404, "no_version", probe{method: "GET", path: "/v1/admin/rules/words?version=99", auth: "op"})
	add(RoleIngest, "POST /v1/admin/rules/:kind/rollback", 404, "no_version", probe{method: "POST", path: "/v1/admin/rules/limits/rollback", auth: "op"})
	for _, route := range ruleRoutes {
		method, path, _ := strings.Cut(route, " ")
		down(RoleIngest, route, 503, "backend_unavailable", probe{method: method, path: strings.Replace(path, ":kind", "words", 1), auth: "op", body: "ok\n"})
	}
	const broadcasts = "POST /v1/admin/broadcasts"
	add(RoleIngest, broadcasts, 401, "bad_operator_key", probe{method: "POST", path: "/v1/admin/broadcasts", auth: "junk", body: `{"text":"hi"}`})
	add(RoleIngest, "GET /v1/admin/broadcasts", 401, "bad_operator_key", probe{method: "GET", path: "/v1/admin/broadcasts", auth: "junk"})
	bodies(RoleIngest, broadcasts, 4<<10, "op")
	add(RoleIngest, broadcasts, 400, "bad_text", probe{method: "POST", path: "/v1/admin/broadcasts", auth: "op", body: `{"text":""}`})
	add(RoleIngest, broadcasts, 400, "bad_nick", probe{method: "POST", path: "/v1/admin/broadcasts", auth: "op", body: `{"text":"hi","nick":"far too long a nick"}`})
	down(RoleIngest, broadcasts, 503, "backend_unavailable", probe{method: "POST", path: "/v1/admin/broadcasts", auth: "op", body: `{"text":"hi"}`})
	down(RoleIngest, "GET /v1/admin/broadcasts", 503, "backend_unavailable", probe{method: "GET", path: "/v1/admin/broadcasts", auth: "op"})
	// Last: it empties the node's broadcast bucket.
	c = add(RoleIngest, broadcasts, 429, "broadcast_rate", probe{method: "POST", path: "/v1/admin/broadcasts", auth: "op", body: `{"text":"walking the API"}`})
	c.tries = 100

	// edge: the WebSocket handshake, refused before the upgrade.
	const ws = "GET /v1/ws"
	add(RoleEdge, ws, 400, "token_in_url", probe{method: "GET", path: "/v1/ws?token=SECRET"})
	add(RoleEdge, ws, 400, "token_in_url", probe{method: "GET", path: "/v1/ws?Token=SECRET"})
	add(RoleEdge, ws, 400, "bad_protocol", probe{method: "GET", path: "/v1/ws?proto=x"})
	not(RoleEdge, ws, 426, "protocol_unsupported", "an edge serving only newer protocols; edge TestHandshakeProtocol")
	add(RoleEdge, ws, 400, "bad_request", probe{method: "GET", path: "/v1/ws?last=nope"})
	add(RoleEdge, ws, 401, "unauthorized", probe{method: "GET", path: "/v1/ws", auth: "junk"})
	add(RoleEdge, ws, 401, "token_epoch", probe{method: "GET", path: "/v1/ws", auth: "futureEpoch"})
	add(RoleEdge, ws, 403, "wrong_node", probe{method: "GET", path: "/v1/ws", auth: "otherNode"})
	add(RoleEdge, ws, 403, "banned", probe{method: "GET", path: "/v1/ws", auth: "banned"})
	add(RoleEdge, ws, 403, "origin", probe{method: "GET", path: "/v1/ws", header: withHeaders(wsUpgrade, map[string]string{"Origin": "https://elsewhere.example"})})
	add(RoleEdge, ws, 404, "no_such_room", probe{method: "GET", path: "/v1/ws", auth: "hostNosuch"})
	add(RoleEdge, ws, 409, "room_not_live", probe{method: "GET", path: "/v1/ws", auth: "hostLater"})
	c = add(RoleEdge, ws, 429, "too_many_conns", probe{method: "GET", path: "/v1/ws", auth: "holder"})
	c.before = func(t *testing.T, w *walk) { w.holdConnection(t) }
	add(RoleEdge, ws, 503, "room_full", probe{method: "GET", path: "/v1/ws", auth: "fullViewer", header: wsUpgrade})
	not(RoleEdge, ws, 503, "draining", "the node drains; edge tests")
	// On a stack whose edge takes one new connection an hour: the held
	// connection took it. (One a second refilled the bucket between the
	// hold and the probe on a loaded machine.)
	c = add(RoleEdge, ws, 503, "connect_rate", probe{method: "GET", path: "/v1/ws", auth: "holder"})
	c.on, c.before = stackCrowded, func(t *testing.T, w *walk) { w.holdConnection(t) }
	// On a stack whose edge takes one connection, at any rate: the held
	// connection fills it.
	c = add(RoleEdge, ws, 503, "over_capacity", probe{method: "GET", path: "/v1/ws", auth: "holder"})
	c.on, c.before = stackFull, func(t *testing.T, w *walk) { w.holdConnection(t) }
	// And the gslb then has no edge to hand out.
	c = add(RoleGSLB, entry, 503, "no_nodes", probe{method: "GET", path: "/v1/entry?room=demo", auth: "ticket"})
	c.on, c.pause = stackFull, 100*time.Millisecond // once the edge's load is reported
	not(RoleEdge, ws, 503, "unavailable", "the room's stream cannot be opened; edge tests")
	not(RoleEdge, ws, 503, "hello_waits", "10,000 sockets waiting for their hello; edge tests (TestHelloWaitsCapped)")
	not(RoleEdge, ws, 429, "hello_waits_addr", "256 sockets of one address waiting for their hello; edge tests (TestHelloWaitsCapped)")
	unloaded(RoleEdge, ws, probe{method: "GET", path: "/v1/ws", auth: "host"})

	// Rate limits: every route behind the limiter, each refused in turn by
	// the rule that covers it.
	limited(RoleGSLB, entry, "walk-entry")
	limited(RoleGSLB, "GET /v1/time", "walk-time")
	for _, route := range []string{"GET /v1/admin/events", "POST /v1/admin/events", "GET /v1/admin/events/:id",
		"PUT /v1/admin/events/:id", "POST /v1/admin/events/:id/end", "DELETE /v1/admin/events/:id"} {
		limited(RoleGSLB, route, "walk-admin")
	}
	limited(RoleIngest, "POST /v1/rooms/:room/barrage", "walk-upload")
	limited(RoleIngest, "POST /v1/rooms/:room/announce", "walk-upload")
	limited(RoleIngest, reports, "walk-upload")
	limited(RoleIngest, gifts, "walk-gifts")
	for _, route := range slices.Concat(lotteryRoutes, reviewRoutes, takedownRoutes, banRoutes, ruleRoutes, []string{broadcasts, "GET /v1/admin/broadcasts"}) {
		limited(RoleIngest, route, "walk-admin")
	}
	limited(RoleEdge, ws, "walk-ws")

	// slicer: run-time budget.
	add(RoleSlicer, "GET /v1/admin/budget", 401, "bad_admin_key", probe{method: "GET", path: "/v1/admin/budget", auth: "junk"})
	add(RoleSlicer, "PUT /v1/admin/budget", 401, "bad_admin_key", probe{method: "PUT", path: "/v1/admin/budget", auth: "junk", body: `{}`})
	bodies(RoleSlicer, "PUT /v1/admin/budget", 1<<10, "op")
	add(RoleSlicer, "PUT /v1/admin/budget", 400, "bad_settings", probe{method: "PUT", path: "/v1/admin/budget", auth: "op", body: `{"budget":60,"shares":[1]}`})
	down(RoleSlicer, "PUT /v1/admin/budget", 503, "backend_unavailable", probe{method: "PUT", path: "/v1/admin/budget", auth: "op", body: `{"budget":60,"shares":[0.1,0.3,0.2,0.4]}`})

	// origin: objects.
	const object = "GET /{key}"
	add(RoleOrigin, object, 404, "not_found", probe{method: "GET", path: "/rooms/demo/s/1.msgpack"})
	add(RoleOrigin, object, 404, "not_found", probe{method: "GET", path: "/rooms%2Fdemo%2Flive.json"})
	c = add(RoleOrigin, object, 412, "precondition_failed", probe{method: "GET", path: "/rooms/demo/live.json", header: map[string]string{"If-Match": `"stale"`}})
	c.pause = 100 * time.Millisecond // until the first manifest is written
	down(RoleOrigin, object, 503, "unavailable", probe{method: "GET", path: "/rooms/demo/live.json"})
	return cs
}

// walk is the running stack and the credentials its cases use.
type walk struct {
	t       *testing.T // the walk's own, which outlives its cases
	st      *Stack
	creds   map[string]string
	conns   []*websocket.Conn
	faults  *faults
	backlog *slicer.MemoryBacklog // the gift log's view of the rooms' gift backlogs
	// other holds the walk's other stacks by name, once started.
	other map[string]*walk
}

func (w *walk) base(role string) string {
	u := w.st.URLs[role]
	if role == RoleEdge {
		u = "http://" + strings.TrimSuffix(strings.TrimPrefix(u, "ws://"), "/v1/ws")
	}
	return u
}

// TestWalkEveryAnswer sends every request of the table in docs/api.md to
// an in-process stack of every role and checks each answer: its status,
// Content-Type: application/json and its code, with no Location (no
// redirect, and so no token copied into one).
func TestWalkEveryAnswer(t *testing.T) {
	words := filepath.Join(t.TempDir(), "words.txt")
	if err := os.WriteFile(words, []byte("forbidden\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	walkEvent := event.Event{ID: "walk", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{
		{ID: "strict", Limits: &event.Limits{Words: "refuse"}},
		{ID: "lane", Limits: &event.Limits{FastLanePerSec: 1}},
		{ID: "full"},
		{ID: "paid", TicketScopeRequired: true},
	}}
	later := event.Event{ID: "walk-later", Start: now.Add(time.Hour), End: now.Add(2 * time.Hour), Rooms: []event.Room{{ID: "later"}}}
	f := &faults{}
	cfg := Config{
		Dev:       true, // the dev keys, with backends of the walk's own
		Events:    []event.Event{walkEvent, later},
		WordsFile: words, WordPolicy: "mask",
		// One connection per user and per room: the walk holds one to
		// show both limits.
		EdgeMaxUserConns: 1, EdgeMaxRoomConns: 1,
	}
	backlog := f.wrap(t, &cfg.Backends)
	st := startStack(t, cfg)
	w := &walk{t: t, st: st, creds: map[string]string{"op": DevServiceKey, "junk": "not-a-key"}, faults: f, backlog: backlog}
	t.Cleanup(func() {
		for _, c := range w.conns {
			c.Close()
		}
	})
	w.setUp(t)

	client := &http.Client{
		Timeout: 10 * time.Second,
		// A redirect is an answer to check, not to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for _, tc := range walkCases() {
		if tc.notWalked != "" {
			continue
		}
		t.Run(tc.String(), func(t *testing.T) {
			w := w
			if tc.on != "" {
				w = w.stack(t, tc.on)
			}
			if tc.before != nil {
				tc.before(t, w)
			}
			if tc.fault {
				w.faults.down.Store(true)
				defer w.faults.down.Store(false)
			}
			resp, body := w.answer(t, client, tc)
			status := resp.StatusCode
			if status != tc.status {
				t.Fatalf("%s %s: status %d, want %d: %s", tc.req.method, tc.req.path, status, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Errorf("Location %q", loc)
			}
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("body %s, want the coded error %q (%v)", body, tc.code, err)
			}
			if strings.Contains(string(body), "SECRET") {
				t.Errorf("the answer repeats a secret: %s", body)
			}
			if tc.check != nil {
				tc.check(t, resp, body)
			}
		})
	}
}

func (w *walk) send(t *testing.T, client *http.Client, role string, p probe) (*http.Response, []byte) {
	t.Helper()
	req := w.request(t, role, p)
	var continued atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{Got100Continue: func() { continued.Store(true) }}))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if continued.Load() && resp.StatusCode == http.StatusRequestEntityTooLarge {
		t.Errorf("413 after a 100 Continue: the client was told to send the body it is then refused")
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// request builds p's request to role's server.
func (w *walk) request(t *testing.T, role string, p probe) *http.Request {
	t.Helper()
	var body io.Reader
	if p.body != "" {
		body = strings.NewReader(p.body)
	}
	req, err := http.NewRequest(p.method, w.base(role)+p.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.auth != "" {
		tok, ok := w.creds[p.auth]
		if !ok {
			t.Fatalf("no credential %q", p.auth)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range p.header {
		req.Header.Set(k, v)
	}
	return req
}

// answer sends tc's request as tc says (once, tries at once, or pause
// apart until the answer comes) and returns the answer looked for, or the
// last one.
func (w *walk) answer(t *testing.T, client *http.Client, tc walkCase) (*http.Response, []byte) {
	t.Helper()
	want := func(resp *http.Response, body []byte) bool {
		return resp.StatusCode == tc.status && strings.Contains(string(body), `"code":"`+tc.code+`"`)
	}
	switch {
	case tc.pause > 0:
		var resp *http.Response
		var body []byte
		// testwait.Poll would do, but the answer is kept: the pause
		// between two probes is a poll's, not a synchronisation.
		deadline := time.Now().Add(testwait.Limit)
		for {
			if resp, body = w.send(t, client, tc.role, tc.req); want(resp, body) || time.Now().After(deadline) {
				return resp, body
			}
			time.Sleep(tc.pause)
		}
	case tc.tries > 1:
		type result struct {
			resp *http.Response
			body []byte
			err  error
		}
		reqs := make([]*http.Request, tc.tries)
		for i := range reqs {
			reqs[i] = w.request(t, tc.role, tc.req)
		}
		results := make([]result, len(reqs))
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Go(func() {
				resp, err := client.Do(req)
				if err != nil {
					results[i].err = err
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				results[i] = result{resp, b, err}
			})
		}
		wg.Wait()
		for _, r := range results {
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
		for _, r := range results {
			if want(r.resp, r.body) {
				return r.resp, r.body
			}
		}
		last := results[len(results)-1]
		return last.resp, last.body
	}
	return w.send(t, client, tc.role, tc.req)
}

// stack returns the walk's other stack of that name, starting it (on
// the walk's own test: it serves the rest of the walk) at its first case.
func (w *walk) stack(t *testing.T, name string) *walk {
	if u := w.other[name]; u != nil {
		return u
	}
	f := &faults{}
	cfg := Config{Dev: true}
	switch name {
	case stackUnloaded:
		f.neverList.Store(true)
		cfg.Backends.Shared.Events = flakyEvents{event.NewMemoryStore(), f}
	case stackCrowded:
		cfg.EdgeConnectRate = 1.0 / 3600
	case stackFull:
		cfg.EdgeCapacity, cfg.EdgeConnectRate = 1, -1
	case stackLimited:
		cfg.RateLimits = limitedRules()
	}
	st := startStack(w.t, cfg)
	u := &walk{t: w.t, st: st, faults: f, creds: map[string]string{"op": DevServiceKey, "ticket": w.creds["ticket"]}}
	tok, _, err := st.keyring.Sign(auth.Claims{Room: "demo", Role: auth.RoleHost, Addrs: []string{st.URLs[RoleIngest], st.URLs[RoleEdge]},
		Ingests: 1, Login: time.Now().UnixMilli(), RegisteredClaims: jwt.RegisteredClaims{Subject: "host"}})
	if err != nil {
		t.Fatal(err)
	}
	u.creds["host"], u.creds["holder"] = tok, tok
	if w.other == nil {
		w.other = map[string]*walk{}
	}
	w.other[name] = u
	w.t.Cleanup(func() {
		for _, c := range u.conns {
			c.Close()
		}
	})
	return u
}

// setUp makes the credentials and the state the cases need.
func (w *walk) setUp(t *testing.T) {
	t.Helper()
	tk := func(user, role string) string {
		s, err := auth.MintTicket(auth.DevTicketKey, user, auth.Ticket{Nick: user, Role: role}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w.creds["ticket"] = tk("walker", auth.RoleViewer)
	w.creds["badClaimTicket"] = tk("two words", auth.RoleViewer)
	w.creds["elsewhereTicket"] = ticket(t, "elsewhere", auth.RoleViewer, "full")
	long, err := auth.MintTicket(auth.DevTicketKey, "long", auth.Ticket{}, 60*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w.creds["longTicket"] = long
	w.creds["viewer"] = w.entryToken(t, "demo", tk("viewer", auth.RoleViewer))
	w.creds["reporter"] = w.entryToken(t, "demo", tk("reporter", auth.RoleViewer))
	w.creds["host"] = w.entryToken(t, "demo", ticket(t, "host", auth.RoleHost, "demo"))
	w.creds["strictViewer"] = w.entryToken(t, "strict", tk("strict-viewer", auth.RoleViewer))
	w.creds["holder"] = w.entryToken(t, "full", tk("holder", auth.RoleViewer))
	w.creds["fullViewer"] = w.entryToken(t, "full", tk("full-viewer", auth.RoleViewer))

	// Tokens no entry hands out, signed with the stack's own keys: for
	// rooms the entry refuses, for other nodes, for this ingest as a
	// fallback only.
	ingest, edge := w.st.URLs[RoleIngest], w.st.URLs[RoleEdge]
	sign := func(room, role string, ingests int, addrs ...string) string {
		s, _, err := w.st.keyring.Sign(auth.Claims{Room: room, Role: role, Addrs: addrs, Ingests: ingests,
			Login: time.Now().UnixMilli(), RegisteredClaims: jwt.RegisteredClaims{Subject: "signed-" + role}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w.creds["hostNosuch"] = sign("nosuch", auth.RoleHost, 1, ingest, edge)
	w.creds["hostLater"] = sign("later", auth.RoleHost, 1, ingest, edge)
	w.creds["otherNode"] = sign("demo", auth.RoleHost, 1, "http://other.invalid:1", "ws://other.invalid:2/v1/ws")
	w.creds["fallback"] = sign("demo", auth.RoleViewer, 2, ghostIngest, ingest, edge)
	w.creds["futureEpoch"] = futureToken(t, ingest, edge)
	// A banned user: refused entry, and a token signed before the ban
	// refused by the edge.
	w.creds["bannedTicket"] = tk("banned-walker", auth.RoleViewer)
	banned, _, err := w.st.keyring.Sign(auth.Claims{Room: "demo", Role: auth.RoleViewer, Addrs: []string{ingest, edge}, Ingests: 1,
		Login: time.Now().UnixMilli(), RegisteredClaims: jwt.RegisteredClaims{Subject: "banned-walker"}})
	if err != nil {
		t.Fatal(err)
	}
	w.creds["banned"] = banned
	w.op(t, "PUT", RoleIngest, "/v1/admin/bans/banned-walker", `{"reason":"walk"}`, http.StatusOK)

	// The word list is read by the ingest's own loop: wait for it.
	testwait.For(t, "the ingest to load its word list", func() bool { return w.wordsLoaded(t) })

	op := func(method, path, body string, want int) {
		t.Helper()
		role := RoleGSLB
		if strings.Contains(path, "/rooms/") {
			role = RoleIngest
		}
		w.op(t, method, role, path, body, want)
	}
	// A lottery to collide with, and an event that has ended.
	op("POST", "/v1/admin/rooms/demo/lotteries", `{"id":"draw-1","keyword":"draw","duration_seconds":600}`, http.StatusCreated)
	// A reported message the stream never held (its sender unknown).
	w.report(t, "viewer", "demo", `{"id":"1000-0","k":1,"reason":"spam"}`)
	now := time.Now().UTC()
	ended, _ := json.Marshal(event.Event{ID: "walk-ended", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "ended"}}})
	op("POST", "/v1/admin/events", string(ended), http.StatusCreated)
	op("POST", "/v1/admin/events/walk-ended/end", "", http.StatusOK)
}

// op sends a set-up request to role with the operator (and gift) key and
// fails unless it is answered want.
func (w *walk) op(t *testing.T, method, role, path, body string, want int) {
	t.Helper()
	req, _ := http.NewRequest(method, w.base(role)+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+DevServiceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("set-up %s %s: %d %s", method, path, resp.StatusCode, b)
	}
}

// report sends a viewer's report as the credential cred and fails unless
// it is taken (202).
func (w *walk) report(t *testing.T, cred, room, body string) {
	t.Helper()
	req, _ := http.NewRequest("POST", w.base(RoleIngest)+"/v1/rooms/"+room+"/reports", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+w.creds[cred])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("set-up report: %d %s", resp.StatusCode, b)
	}
}

// wordsLoaded reports whether the ingest holds a word list (its gauge of
// listed words).
func (w *walk) wordsLoaded(t *testing.T) bool {
	t.Helper()
	mfs, err := w.st.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "danmaku_ingest_words_listed" {
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() > 0 {
					return true
				}
			}
		}
	}
	return false
}

// entryToken is the dynamic token of an entry to room with ticket.
func (w *walk) entryToken(t *testing.T, room, ticket string) string {
	t.Helper()
	code, e := getEntry(t, w.base(RoleGSLB), room, ticket)
	if code != http.StatusOK {
		t.Fatalf("entry to %s: %d", room, code)
	}
	return e.Token
}

// holdConnection opens a WebSocket with the "holder" credential and keeps
// it open: the connection the edge's limits then count.
func (w *walk) holdConnection(t *testing.T) {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + w.creds["holder"]}}
	c, resp, err := websocket.DefaultDialer.Dial(w.st.URLs[RoleEdge], h)
	if err != nil {
		t.Fatalf("hold a connection: %v (%v)", err, resp)
	}
	w.conns = append(w.conns, c)
}

// ghostIngest is the address of an ingest node that is not there.
const ghostIngest = "http://ghost.invalid:1"

// ghostIngest makes ghostIngest look live in the load table: the primary
// of the "fallback" token, so this ingest refuses its barrage.
func (w *walk) ghostIngest(t *testing.T) {
	t.Helper()
	l := loadtable.NodeLoad{ID: "walk-ghost", Kind: loadtable.KindIngest, Addr: ghostIngest, At: time.Now()}
	if err := w.st.cfg.Backends.Shared.Load.Report(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.st.cfg.Backends.Shared.Load.Remove(context.Background(), l.ID) })
}

// futureToken is a well-signed token of an epoch a day ahead, which no
// node holds keys for yet.
func futureToken(t *testing.T, addrs ...string) string {
	t.Helper()
	ctx := context.Background()
	ahead := clock.NewFake(time.Now().Add(24 * time.Hour))
	secrets := auth.NewMemorySecrets()
	master := []byte("walk-master-key-walk-master-key-")
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: master, Clock: ahead})
	if err != nil {
		t.Fatal(err)
	}
	if err := center.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: master, Clock: ahead})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	tok, _, err := ring.Sign(auth.Claims{Room: "demo", Role: auth.RoleHost, Addrs: addrs, Ingests: 1, RegisteredClaims: jwt.RegisteredClaims{Subject: "future"}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// faults takes the walk's backends down while down is set: each store
// answers errDown. neverList makes an events store that never lists.
type faults struct{ down, neverList atomic.Bool }

var errDown = errors.New("walk: backend down")

func (f *faults) err() error {
	if f.down.Load() {
		return errDown
	}
	return nil
}

// wrap fills b with in-memory backends that fail on f, and returns the
// gift backlog the gift log admits gifts by.
func (f *faults) wrap(t *testing.T, b *Backends) *slicer.MemoryBacklog {
	t.Helper()
	streams := stream.NewMemoryStore(nil)
	backlog := slicer.NewMemoryBacklog(nil)
	gifts, err := ingest.NewMemoryGiftLog(ingest.MemoryGiftLogConfig{Streams: streams, Backlog: backlog})
	if err != nil {
		t.Fatal(err)
	}
	// Only the site stream fails: the rooms' streams keep every other
	// case's stack running.
	b.Shared.Streams = flakySite{streams, f}
	b.Ingest.Gifts = flakyGifts{gifts, f}
	b.Ingest.FastLane = flakyFastLane{ingest.NewMemoryFastLane(streams, nil), f}
	b.Shared.Events = flakyEvents{event.NewMemoryStore(), f}
	b.Slicer.Settings = flakySettings{&slicer.MemorySettings{}, f}
	b.Shared.Bans = flakyBans{ingest.NewMemoryBanStore(), f}
	b.Shared.Rules = flakyRules{rules.NewMemoryStore(), f}
	b.Ingest.Lotteries = flakyLotteries{ingest.NewMemoryLotteryStore(nil), f}
	b.Ingest.Reports = flakyReports{ingest.NewMemoryReportStore(ingest.ReportBounds{}, nil), f}
	b.Ingest.Takedowns = flakyTakedowns{ingest.NewMemoryTakedownStore(nil), f}
	b.Shared.Objects = flakyObjects{objstore.NewMemoryStore(), f}
	return backlog
}

type flakySite struct {
	*stream.MemoryStore
	f *faults
}

func (s flakySite) Append(ctx context.Context, key stream.Key, msgs []wire.Message) ([]wire.Message, error) {
	if err := s.f.err(); err != nil && key == stream.SiteKey {
		return nil, err
	}
	return s.MemoryStore.Append(ctx, key, msgs)
}

func (s flakySite) LastID(ctx context.Context, key stream.Key) (string, error) {
	if err := s.f.err(); err != nil && key == stream.SiteKey {
		return "", err
	}
	return s.MemoryStore.LastID(ctx, key)
}

type flakyTakedowns struct {
	ingest.TakedownStore
	f *faults
}

func (s flakyTakedowns) Lookup(ctx context.Context, room, id string, k wire.Kind) (ingest.Takedown, bool, int, error) {
	if err := s.f.err(); err != nil {
		return ingest.Takedown{}, false, 0, err
	}
	return s.TakedownStore.Lookup(ctx, room, id, k)
}

func (s flakyTakedowns) List(ctx context.Context, room string) ([]ingest.Takedown, error) {
	if err := s.f.err(); err != nil {
		return nil, err
	}
	return s.TakedownStore.List(ctx, room)
}

type flakyGifts struct {
	ingest.GiftLog
	f *faults
}

func (g flakyGifts) AppendGift(ctx context.Context, room, orderID string, m wire.Message) (string, bool, error) {
	if err := g.f.err(); err != nil {
		return "", false, err
	}
	return g.GiftLog.AppendGift(ctx, room, orderID, m)
}

type flakyFastLane struct {
	ingest.FastLane
	f *faults
}

func (l flakyFastLane) Show(ctx context.Context, room string, lane stream.Lane, m wire.Message, capPerSec int) (ingest.Shown, error) {
	if err := l.f.err(); err != nil {
		return ingest.Shown{}, err
	}
	return l.FastLane.Show(ctx, room, lane, m, capPerSec)
}

type flakyEvents struct {
	event.Store
	f *faults
}

func (e flakyEvents) Create(ctx context.Context, ev event.Event) error {
	if err := e.f.err(); err != nil {
		return err
	}
	return e.Store.Create(ctx, ev)
}

func (e flakyEvents) Update(ctx context.Context, ev event.Event) error {
	if err := e.f.err(); err != nil {
		return err
	}
	return e.Store.Update(ctx, ev)
}

func (e flakyEvents) Get(ctx context.Context, id string) (event.Event, error) {
	if err := e.f.err(); err != nil {
		return event.Event{}, err
	}
	return e.Store.Get(ctx, id)
}

func (e flakyEvents) List(ctx context.Context) ([]event.Event, error) {
	if err := e.f.err(); err != nil || e.f.neverList.Load() {
		return nil, errDown
	}
	return e.Store.List(ctx)
}

func (e flakyEvents) Delete(ctx context.Context, id string) error {
	if err := e.f.err(); err != nil {
		return err
	}
	return e.Store.Delete(ctx, id)
}

type flakySettings struct {
	slicer.SettingsStore
	f *faults
}

func (s flakySettings) Save(ctx context.Context, st slicer.Settings) error {
	if err := s.f.err(); err != nil {
		return err
	}
	return s.SettingsStore.Save(ctx, st)
}

type flakyRules struct {
	*rules.MemoryStore
	f *faults
}

func (r flakyRules) Push(ctx context.Context, kind string, body []byte, m rules.Meta) (rules.Version, error) {
	if err := r.f.err(); err != nil {
		return rules.Version{}, err
	}
	return r.MemoryStore.Push(ctx, kind, body, m)
}

func (r flakyRules) Head(ctx context.Context, kind string) (int64, error) {
	if err := r.f.err(); err != nil {
		return 0, err
	}
	return r.MemoryStore.Head(ctx, kind)
}

func (r flakyRules) Get(ctx context.Context, kind string, version int64) (rules.Document, error) {
	if err := r.f.err(); err != nil {
		return rules.Document{}, err
	}
	return r.MemoryStore.Get(ctx, kind, version)
}

func (r flakyRules) History(ctx context.Context, kind string, n int) ([]rules.Version, error) {
	if err := r.f.err(); err != nil {
		return nil, err
	}
	return r.MemoryStore.History(ctx, kind, n)
}

type flakyBans struct {
	ingest.BanStore
	f *faults
}

func (b flakyBans) Put(ctx context.Context, ban ingest.Ban) error {
	if err := b.f.err(); err != nil {
		return err
	}
	return b.BanStore.Put(ctx, ban)
}

func (b flakyBans) Delete(ctx context.Context, user, room string) error {
	if err := b.f.err(); err != nil {
		return err
	}
	return b.BanStore.Delete(ctx, user, room)
}

func (b flakyBans) User(ctx context.Context, user string) ([]ingest.Ban, error) {
	if err := b.f.err(); err != nil {
		return nil, err
	}
	return b.BanStore.User(ctx, user)
}

func (b flakyBans) List(ctx context.Context) ([]ingest.Ban, int64, error) {
	if err := b.f.err(); err != nil {
		return nil, 0, err
	}
	return b.BanStore.List(ctx)
}

type flakyReports struct {
	ingest.ReportStore
	f *faults
}

func (r flakyReports) Add(ctx context.Context, rep ingest.Report) (ingest.ReportAdded, error) {
	if err := r.f.err(); err != nil {
		return ingest.ReportAdded{}, err
	}
	return r.ReportStore.Add(ctx, rep)
}

func (r flakyReports) Top(ctx context.Context, room string, n int) ([]ingest.ReportItem, error) {
	if err := r.f.err(); err != nil {
		return nil, err
	}
	return r.ReportStore.Top(ctx, room, n)
}

func (r flakyReports) Get(ctx context.Context, room string, k wire.Kind, id string) (ingest.ReportItem, error) {
	if err := r.f.err(); err != nil {
		return ingest.ReportItem{}, err
	}
	return r.ReportStore.Get(ctx, room, k, id)
}

type flakyLotteries struct {
	ingest.LotteryStore
	f *faults
}

func (l flakyLotteries) Start(ctx context.Context, lot ingest.Lottery) (ingest.Lottery, error) {
	if err := l.f.err(); err != nil {
		return ingest.Lottery{}, err
	}
	return l.LotteryStore.Start(ctx, lot)
}

func (l flakyLotteries) Stop(ctx context.Context, room, id string, at time.Time) (ingest.Lottery, error) {
	if err := l.f.err(); err != nil {
		return ingest.Lottery{}, err
	}
	return l.LotteryStore.Stop(ctx, room, id, at)
}

func (l flakyLotteries) Get(ctx context.Context, room, id string) (ingest.Lottery, error) {
	if err := l.f.err(); err != nil {
		return ingest.Lottery{}, err
	}
	return l.LotteryStore.Get(ctx, room, id)
}

func (l flakyLotteries) Enter(ctx context.Context, room, id, user string) (bool, error) {
	if err := l.f.err(); err != nil {
		return false, err
	}
	return l.LotteryStore.Enter(ctx, room, id, user)
}

func (l flakyLotteries) Running(ctx context.Context) ([]ingest.Lottery, int64, error) {
	if err := l.f.err(); err != nil {
		return nil, 0, err
	}
	return l.LotteryStore.Running(ctx)
}

type flakyObjects struct {
	objstore.Store
	f *faults
}

func (o flakyObjects) Get(ctx context.Context, key string) (*objstore.Object, error) {
	if err := o.f.err(); err != nil {
		return nil, err
	}
	return o.Store.Get(ctx, key)
}

// TestAPIDocListsEveryAnswer: the table "Every non-success answer" in
// docs/api.md has exactly the rows of walkCases, and says "yes" in its
// walked column exactly for the rows the walk sends.
func TestAPIDocListsEveryAnswer(t *testing.T) {
	doc := apiDocAnswers(t)
	want := map[answer]bool{}
	for _, c := range walkCases() {
		if prev, dup := want[c.answer]; dup && prev != (c.notWalked == "") {
			t.Errorf("%v: walked and not walked", c.answer)
		}
		want[c.answer] = c.notWalked == ""
	}
	for a, walked := range want {
		got, ok := doc[a]
		switch {
		case !ok:
			t.Errorf("docs/api.md lacks the row %v", a)
		case got != walked:
			t.Errorf("docs/api.md: row %v says walked=%v, the walk says %v", a, got, walked)
		}
	}
	var extra []string
	for a := range doc {
		if _, ok := want[a]; !ok {
			extra = append(extra, a.String())
		}
	}
	slices.Sort(extra)
	for _, a := range extra {
		t.Errorf("docs/api.md has a row the walk does not know: %v", a)
	}
}

// apiDocAnswers parses the table under "## Every non-success answer":
// | role | route | status | code | when | walked |, route and code in
// backticks, walked "yes" or "no: why".
func apiDocAnswers(t *testing.T) map[answer]bool {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(file), "..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[answer]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Every non-success answer"
			continue
		}
		if !in || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| role ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 6 {
			t.Fatalf("docs/api.md: want 6 cells: %s", line)
		}
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		status, err := strconv.Atoi(cells[2])
		if err != nil {
			t.Fatalf("docs/api.md: status %q: %s", cells[2], line)
		}
		a := answer{cells[0], cells[1], status, cells[3]}
		if _, dup := rows[a]; dup {
			t.Errorf("docs/api.md: row %v twice", a)
		}
		rows[a] = cells[5] == "yes"
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal(`docs/api.md: no table under "## Every non-success answer"`)
	}
	return rows
}
