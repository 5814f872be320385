package ingest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	bans "danmaku/internal/ban"
	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/redisx/redistest"
)

// banBackends are the BanStore implementations the conformance suite runs
// against; Redis on one server and on a cluster.
func banBackends() []struct {
	name string
	open func(t *testing.T) (ingest.BanStore, redis.UniversalClient)
} {
	out := []struct {
		name string
		open func(t *testing.T) (ingest.BanStore, redis.UniversalClient)
	}{
		{"memory", func(t *testing.T) (ingest.BanStore, redis.UniversalClient) { return ingest.NewMemoryBanStore(), nil }},
	}
	for _, k := range redistest.Kinds() {
		out = append(out, struct {
			name string
			open func(t *testing.T) (ingest.BanStore, redis.UniversalClient)
		}{k.Name, func(t *testing.T) (ingest.BanStore, redis.UniversalClient) {
			rdb := k.Client(t)
			return ingest.NewRedisBanStore(rdb), rdb
		}})
	}
	return out
}

// TestBanStoreConformance runs every BanStore through the same cases, each
// on an empty store.
func TestBanStoreConformance(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0).UTC()
	ban := func(user, room string, until time.Time) ingest.Ban {
		return ingest.Ban{User: user, Room: room, Until: until, Reason: "spam", At: t0}
	}
	cases := []struct {
		name string
		run  func(t *testing.T, s ingest.BanStore)
	}{
		{"put, user, list, delete", func(t *testing.T, s ingest.BanStore) {
			v0 := mustVersion(t, s)
			for _, b := range []ingest.Ban{ban("alice", "", time.Time{}), ban("alice", "r1", t0.Add(time.Hour)), ban("bob", "r2", time.Time{}), ban("alice/x", "", time.Time{}), ban("al*", "", time.Time{})} {
				if err := s.Put(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			v1 := mustVersion(t, s)
			if v1 == v0 {
				t.Fatal("version did not move with a write")
			}
			got, err := s.User(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			want := []ingest.Ban{ban("alice", "", time.Time{}), ban("alice", "r1", t0.Add(time.Hour))}
			if !equalBans(got, want) {
				t.Fatalf("User(alice) = %+v, want %+v", got, want)
			}
			if got, _ := s.User(ctx, "al*"); len(got) != 1 || got[0].User != "al*" {
				t.Fatalf("User(al*) = %+v: a pattern character is a plain character", got)
			}
			all, v, err := s.List(ctx)
			if err != nil || len(all) != 5 || v != v1 {
				t.Fatalf("List = %d bans at version %d, %v; want 5 at %d", len(all), v, err, v1)
			}
			if err := s.Delete(ctx, "alice", "r1"); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.User(ctx, "alice"); !equalBans(got, want[:1]) {
				t.Fatalf("after Delete: %+v", got)
			}
			v2 := mustVersion(t, s)
			if err := s.Delete(ctx, "nobody", ""); err != nil {
				t.Fatalf("lifting a missing ban: %v", err)
			}
			if mustVersion(t, s) != v2 {
				t.Fatal("lifting a missing ban moved the version")
			}
		}},
		{"event scope apart from room and every-room bans", func(t *testing.T, s ingest.BanStore) {
			ev := ingest.Ban{User: "carol", Event: "show", Reason: "spam", At: t0}
			for _, b := range []ingest.Ban{ban("carol", "", time.Time{}), ev, ban("carol", "show", time.Time{})} {
				if err := s.Put(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			if got, _ := s.User(ctx, "carol"); len(got) != 3 {
				t.Fatalf("User(carol) = %+v, want the every-room, the room's and the event's ban", got)
			}
			if err := s.Delete(ctx, "carol", bans.EventScope("show")); err != nil {
				t.Fatal(err)
			}
			got, _ := s.User(ctx, "carol")
			if want := []ingest.Ban{ban("carol", "", time.Time{}), ban("carol", "show", time.Time{})}; !equalBans(got, want) {
				t.Fatalf("after lifting the event's ban: %+v, want %+v", got, want)
			}
		}},
		{"put replaces", func(t *testing.T, s ingest.BanStore) {
			_ = s.Put(ctx, ban("carol", "r1", t0.Add(time.Minute)))
			_ = s.Put(ctx, ban("carol", "r1", time.Time{}))
			got, _ := s.User(ctx, "carol")
			if !equalBans(got, []ingest.Ban{ban("carol", "r1", time.Time{})}) {
				t.Fatalf("after a second Put: %+v", got)
			}
		}},
		{"purge deletes lapsed bans only", func(t *testing.T, s ingest.BanStore) {
			_ = s.Put(ctx, ban("dave", "", t0.Add(time.Minute)))
			_ = s.Put(ctx, ban("dave", "r1", t0.Add(time.Hour)))
			_ = s.Put(ctx, ban("erin", "", time.Time{}))
			// Renewed after its first expiry was set: must survive.
			_ = s.Put(ctx, ban("frank", "", t0.Add(time.Minute)))
			_ = s.Put(ctx, ban("frank", "", t0.Add(2*time.Hour)))
			v := mustVersion(t, s)
			n, err := s.Purge(ctx, t0.Add(30*time.Minute))
			if err != nil || n != 1 {
				t.Fatalf("Purge = %d, %v; want 1", n, err)
			}
			if mustVersion(t, s) == v {
				t.Fatal("a purge that deleted did not move the version")
			}
			all, _, _ := s.List(ctx)
			var left []string
			for _, b := range all {
				left = append(left, b.User+"/"+b.Room)
			}
			if !slices.Equal(left, []string{"dave/r1", "erin/", "frank/"}) {
				t.Fatalf("left after purge: %v", left)
			}
			if n, _ := s.Purge(ctx, t0.Add(30*time.Minute)); n != 0 {
				t.Fatalf("second purge deleted %d", n)
			}
		}},
		{"invalid bans refused", func(t *testing.T, s ingest.BanStore) {
			for _, b := range []ingest.Ban{{}, {User: "x", Room: "bad room"}, {User: strings.Repeat("u", 300)}} {
				if err := s.Put(ctx, b); err == nil {
					t.Fatalf("Put(%+v) accepted", b)
				}
			}
		}},
	}
	for _, b := range banBackends() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s, _ := b.open(t)
					c.run(t, s)
				})
			}
		})
	}
}

func mustVersion(t *testing.T, s ingest.BanStore) int64 {
	t.Helper()
	v, err := s.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func equalBans(a, b []ingest.Ban) bool {
	return slices.EqualFunc(a, b, func(x, y ingest.Ban) bool {
		return x.User == y.User && x.Room == y.Room && x.Until.Equal(y.Until) && x.Reason == y.Reason && x.At.Equal(y.At)
	})
}

// countingBanStore counts List calls, to show the list is read only after
// the version moved.
type countingBanStore struct {
	ingest.BanStore
	lists int
}

func (c *countingBanStore) List(ctx context.Context) ([]ingest.Ban, int64, error) {
	c.lists++
	return c.BanStore.List(ctx)
}

func TestBanList(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := &countingBanStore{BanStore: ingest.NewMemoryBanStore()}
	l, err := ingest.NewBanList(ingest.BanListConfig{Store: store, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if l.Ready() || l.Banned("r1", "alice") {
		t.Fatal("banned before the first load")
	}
	_ = store.Put(ctx, ingest.Ban{User: "alice", At: clk.Now()})
	_ = store.Put(ctx, ingest.Ban{User: "bob", Room: "r1", Until: clk.Now().Add(time.Minute), At: clk.Now()})
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		room, user string
		want       bool
	}{{"r1", "alice", true}, {"r2", "alice", true}, {"r1", "bob", true}, {"r2", "bob", false}, {"r1", "carol", false}} {
		if got := l.Banned(c.room, c.user); got != c.want {
			t.Fatalf("Banned(%s, %s) = %v", c.room, c.user, got)
		}
	}
	clk.Advance(time.Minute)
	if l.Banned("r1", "bob") {
		t.Fatal("a lapsed ban still holds before the next reload")
	}
	lists := store.lists
	for range 3 {
		_ = l.Refresh(ctx)
	}
	if store.lists != lists {
		t.Fatalf("unchanged store re-listed %d times", store.lists-lists)
	}
	_ = store.Delete(ctx, "alice", "")
	_ = l.Refresh(ctx)
	if l.Banned("r1", "alice") || store.lists != lists+1 {
		t.Fatalf("lifted ban still holds (lists %d)", store.lists-lists)
	}
	if _, err := ingest.NewBanList(ingest.BanListConfig{}); err == nil {
		t.Fatal("no store accepted")
	}
}

// BenchmarkBanned is the per-comment ban check against 10,000 bans.
func BenchmarkBanned(b *testing.B) {
	ctx := context.Background()
	store := ingest.NewMemoryBanStore()
	for i := range 10_000 {
		_ = store.Put(ctx, ingest.Ban{User: "user" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26%13), Room: "r1"})
	}
	l, _ := ingest.NewBanList(ingest.BanListConfig{Store: store, Logger: quiet})
	if err := l.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		l.Banned("r1", "someone-not-banned")
	}
}

func banAPI(t testing.TB) (*gin.Engine, ingest.BanStore, *clock.Fake, *int) {
	gin.SetMode(gin.ReleaseMode)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0).UTC())
	store := ingest.NewMemoryBanStore()
	changed := 0
	api := &ingest.BanAPI{Store: store, Keys: []string{"op-key"}, Clock: clk, Changed: func(context.Context) { changed++ }}
	e := httpx.NewEngine(httpx.EngineConfig{Role: "ingest", Logger: quiet})
	api.Register(e)
	return e, store, clk, &changed
}

func banCall(t *testing.T, e *gin.Engine, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

func TestBanAPI(t *testing.T) {
	e, store, clk, changed := banAPI(t)
	if code, _ := banCall(t, e, "PUT", "/v1/admin/bans/alice", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no key: %d", code)
	}
	if code, _ := banCall(t, e, "PUT", "/v1/admin/bans/alice", "wrong", ""); code != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d", code)
	}
	// Empty body: every room, for ever.
	if code, out := banCall(t, e, "PUT", "/v1/admin/bans/alice", "op-key", ""); code != http.StatusOK || out["user"] != "alice" || out["until"] != nil {
		t.Fatalf("ban for ever: %d %v", code, out)
	}
	code, out := banCall(t, e, "PUT", "/v1/admin/bans/alice", "op-key", `{"room":"r1","ttl_seconds":600,"reason":"flood"}`)
	if code != http.StatusOK || out["until"] != clk.Now().Add(10*time.Minute).Format(time.RFC3339) || out["room"] != "r1" {
		t.Fatalf("ban with ttl: %d %v", code, out)
	}
	for _, body := range []string{
		`{"room":"bad room"}`,
		`{"ttl_seconds":-1}`,
		`{"ttl_seconds":5,"until":"2030-01-01T00:00:00Z"}`,
		`{"until":"2000-01-01T00:00:00Z"}`,
		`{"unknown":1}`,
	} {
		if code, out := banCall(t, e, "PUT", "/v1/admin/bans/bob", "op-key", body); code != http.StatusBadRequest {
			t.Fatalf("PUT %s: %d %v", body, code, out)
		}
	}
	code, out = banCall(t, e, "GET", "/v1/admin/bans/alice", "op-key", "")
	if bans, _ := out["bans"].([]any); code != http.StatusOK || len(bans) != 2 {
		t.Fatalf("GET alice: %d %v", code, out)
	}
	code, out = banCall(t, e, "GET", "/v1/admin/bans", "op-key", "")
	if bans, _ := out["bans"].([]any); code != http.StatusOK || len(bans) != 2 {
		t.Fatalf("GET all: %d %v", code, out)
	}
	// A lapsed ban is not shown, though it waits in the store for a purge.
	clk.Advance(11 * time.Minute)
	if _, out := banCall(t, e, "GET", "/v1/admin/bans/alice", "op-key", ""); len(out["bans"].([]any)) != 1 {
		t.Fatalf("lapsed ban shown: %v", out)
	}
	if code, _ := banCall(t, e, "DELETE", "/v1/admin/bans/alice?room=bad%20room", "op-key", ""); code != http.StatusBadRequest {
		t.Fatalf("DELETE bad room: %d", code)
	}
	if code, _ := banCall(t, e, "DELETE", "/v1/admin/bans/alice", "op-key", ""); code != http.StatusOK {
		t.Fatalf("DELETE: %d", code)
	}
	if bans, _ := store.User(context.Background(), "alice"); len(bans) != 1 || bans[0].Room != "r1" {
		t.Fatalf("after DELETE: %+v", bans)
	}
	if *changed != 3 {
		t.Fatalf("Changed called %d times, want 3 (two bans, one lift)", *changed)
	}
}

// TestBanAPIRanges: a ban's end, given as a TTL or a time, is range-checked
// with a coded 400 naming the field and its range. A TTL of 1e10 s once
// overflowed into an until in 1759: a 200 for a ban not in force.
func TestBanAPIRanges(t *testing.T) {
	e, _, clk, _ := banAPI(t)
	const tenYears = 10 * 365 * 24 * time.Hour
	for _, tt := range []struct {
		name, body string
		until      time.Time // zero: refused, naming field
		field      string
	}{
		{"ttl overflowing a duration", `{"ttl_seconds":10000000000}`, time.Time{}, "ttl_seconds must be 1-315360000"},
		{"largest ttl", `{"ttl_seconds":9223372036854775807}`, time.Time{}, "ttl_seconds must be 1-315360000"},
		{"ttl one past ten years", `{"ttl_seconds":315360001}`, time.Time{}, "ttl_seconds must be 1-315360000"},
		{"ttl of ten years", `{"ttl_seconds":315360000}`, clk.Now().Add(tenYears), ""},
		{"until in 9999", `{"until":"9999-12-31T23:59:59Z"}`, time.Time{}, "until must be in the future and at most 10 years ahead"},
		{"until just past ten years", `{"until":"` + clk.Now().Add(tenYears+time.Second).Format(time.RFC3339) + `"}`, time.Time{}, "until must be"},
		{"until in ten years", `{"until":"` + clk.Now().Add(tenYears).Format(time.RFC3339) + `"}`, clk.Now().Add(tenYears), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := banCall(t, e, "PUT", "/v1/admin/bans/bob", "op-key", tt.body)
			if tt.field == "" {
				if code != http.StatusOK || out["until"] != tt.until.Format(time.RFC3339) {
					t.Fatalf("%d %v, want 200 until %s", code, out, tt.until.Format(time.RFC3339))
				}
				return
			}
			e, _ := out["error"].(map[string]any)
			if msg, _ := e["message"].(string); code != http.StatusBadRequest || e["code"] != "bad_ban" || !strings.Contains(msg, tt.field) {
				t.Fatalf("%d %v, want 400 bad_ban naming %q", code, out, tt.field)
			}
		})
	}
}

// TestBanAPIIdentity: a ban's user id follows the user id rules of tickets
// and gifts — NUL, a bidi override, bytes that are not UTF-8 are refused
// with a coded 400 naming the rule — so that every listed id is the id the
// ban is lifted by; its reason is cleaned as comments are.
func TestBanAPIIdentity(t *testing.T) {
	e, store, _, _ := banAPI(t)
	for _, tt := range []struct{ name, escaped, rule string }{
		{"NUL", "a%00b", "control character"},
		{"right-to-left override", "alice%E2%80%AE", "invisible format character"},
		{"not UTF-8", "%ff", "not valid UTF-8"},
		{"U+FFFD", "%EF%BF%BD", "U+FFFD"},
		{"white space", "a%20b", "white space"},
		{"too long", strings.Repeat("u", 65), "at most 64 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := banCall(t, e, "PUT", "/v1/admin/bans/"+tt.escaped, "op-key", "")
			e, _ := out["error"].(map[string]any)
			if msg, _ := e["message"].(string); code != http.StatusBadRequest || e["code"] != "bad_ban" || !strings.Contains(msg, tt.rule) {
				t.Fatalf("%d %v, want 400 bad_ban naming %q", code, out, tt.rule)
			}
		})
	}
	if bans, _, _ := store.List(context.Background()); len(bans) != 0 {
		t.Fatalf("refused bans stored: %+v", bans)
	}

	// An id the rules allow, however unusual, is listed as it is and
	// lifted by what the list says.
	const user = "用户/1+é"
	code, out := banCall(t, e, "PUT", "/v1/admin/bans/"+url.PathEscape(user), "op-key", "{\"reason\":\"\\u001b[31mflood\\u001b[0m \\u202eer  \\n spam\"}")
	if code != http.StatusOK || out["reason"] != "[31mflood[0m er spam" {
		t.Fatalf("ban: %d %v, want the reason cleaned", code, out)
	}
	_, out = banCall(t, e, "GET", "/v1/admin/bans", "op-key", "")
	bans, _ := out["bans"].([]any)
	if len(bans) != 1 {
		t.Fatalf("list: %v", out)
	}
	listed, _ := bans[0].(map[string]any)["user"].(string)
	if code, _ := banCall(t, e, "DELETE", "/v1/admin/bans/"+url.PathEscape(listed), "op-key", ""); code != http.StatusOK {
		t.Fatalf("lift %q: %d", listed, code)
	}
	if bans, _, _ := store.List(context.Background()); len(bans) != 0 {
		t.Fatalf("the listed id %q did not lift the ban: %+v", listed, bans)
	}
}
