package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

const operatorKey = "operator-key-0123456789"

// siteMessages reads the site stream whole.
func siteMessages(t *testing.T, st stream.Store) []wire.Message {
	t.Helper()
	es, err := st.Read(context.Background(), stream.SiteKey, "0-0", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestBroadcastAPI: an operator posts a site-wide broadcast: stored once
// on the site stream as a system message of role ops with Site set, listed
// by GET; bad input and a missing key are refused with codes; beyond the
// per-node rate, 429 broadcast_rate with a Retry-After. No room is
// registered by it.
func TestBroadcastAPI(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFixtureOn(t, clk, stream.NewMemoryStore(clk), nil)
	(&BroadcastAPI{Streams: f.store, Keys: []string{operatorKey}, Clock: clk, Registerer: f.reg}).Register(f.engine)

	for _, tc := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"no key", "", `{"text":"hi"}`, 401, "bad_operator_key"},
		{"wrong key", "nope", `{"text":"hi"}`, 401, "bad_operator_key"},
		{"not JSON", operatorKey, `hi`, 400, ""},
		{"unknown field", operatorKey, `{"text":"hi","room":"r1"}`, 400, ""},
		{"empty text", operatorKey, `{"text":"  \u200b "}`, 400, "bad_text"},
		{"long text", operatorKey, `{"text":"` + strings.Repeat("x", 201) + `"}`, 400, "bad_text"},
		{"long nick", operatorKey, `{"text":"hi","nick":"` + strings.Repeat("n", 20) + `"}`, 400, "bad_nick"},
	} {
		rec := f.do(http.MethodPost, "/v1/admin/broadcasts", tc.key, tc.body)
		if rec.Code != tc.status || (tc.code != "" && !strings.Contains(rec.Body.String(), `"`+tc.code+`"`)) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rec.Code, rec.Body, tc.status, tc.code)
		}
	}
	if n := len(siteMessages(t, f.store)); n != 0 {
		t.Fatalf("%d broadcasts stored by refused requests", n)
	}

	rec := f.do(http.MethodPost, "/v1/admin/broadcasts", operatorKey, `{"text":"  Doors  open at 8 ","nick":"crew"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("post: %d %s", rec.Code, rec.Body)
	}
	var ans struct{ ID string }
	_ = json.Unmarshal(rec.Body.Bytes(), &ans)
	got := siteMessages(t, f.store)
	if len(got) != 1 || got[0].ID != ans.ID || !got[0].Site || got[0].Kind != wire.KindSystem || got[0].Role != auth.RoleOps ||
		got[0].Text != "Doors open at 8" || got[0].Nick != "crew" {
		t.Fatalf("stored %+v (answer id %q)", got, ans.ID)
	}
	rooms, _ := f.store.Rooms(context.Background())
	for _, r := range rooms {
		if r.ID == stream.SiteRoom {
			t.Fatal("the site stream was registered as a room")
		}
	}
	rec = f.do(http.MethodGet, "/v1/admin/broadcasts", operatorKey, "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), ans.ID) {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}

	// The burst (20, one used) then 429 with a Retry-After.
	for i := range int(broadcastBurst) - 1 {
		if rec := f.do(http.MethodPost, "/v1/admin/broadcasts", operatorKey, `{"text":"n`+string(rune('a'+i))+`"}`); rec.Code != http.StatusCreated {
			t.Fatalf("post %v within the burst: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec = f.do(http.MethodPost, "/v1/admin/broadcasts", operatorKey, `{"text":"one too many"}`)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "broadcast_rate") || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("over the rate: %d %s %v", rec.Code, rec.Body, rec.Header())
	}
	clk.Advance(time.Second)
	if rec := f.do(http.MethodPost, "/v1/admin/broadcasts", operatorKey, `{"text":"later"}`); rec.Code != http.StatusCreated {
		t.Fatalf("after a second: %d %s", rec.Code, rec.Body)
	}
}

// TestGiftBroadcast: a gift worth at least BroadcastGiftValue is also
// broadcast site-wide, once — a resent order broadcasts nothing — and a
// cheaper one is not.
func TestGiftBroadcast(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BroadcastGiftValue = 1000 })
	for _, body := range []string{
		giftBody(nil), // 500 × 2 = 1,000: broadcast
		giftBody(nil), // the same order again
		giftBody(func(g map[string]any) { g["order_id"], g["count"] = "order-2", 1 }), // 500: no
	} {
		if rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, body); rec.Code != http.StatusOK {
			t.Fatalf("gift: %d %s", rec.Code, rec.Body)
		}
	}
	got := siteMessages(t, f.store)
	if len(got) != 1 || !got[0].Site || got[0].Text != "nick sent 2×rocket in "+room {
		t.Fatalf("site stream %+v, want one broadcast of the first gift", got)
	}
	if n := len(f.entries(t, room, stream.Live)); n != 2 {
		t.Fatalf("%d gifts in the room, want 2", n)
	}
}

func TestWorthAtLeast(t *testing.T) {
	for _, tc := range []struct {
		v     int64
		c     uint32
		lo    int64
		worth bool
	}{
		{1000, 0, 1000, true}, {999, 1, 1000, false}, {500, 2, 1000, true}, {334, 3, 1000, true}, {333, 3, 1000, false},
		{1 << 62, 4, 1 << 62, true}, {0, 10, 1, false}, {-5, 10, 1, false},
	} {
		if got := worthAtLeast(wire.Message{Value: tc.v, Count: tc.c}, tc.lo); got != tc.worth {
			t.Errorf("worthAtLeast(%d×%d, %d) = %v", tc.v, tc.c, tc.lo, got)
		}
	}
}
