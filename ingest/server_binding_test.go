package ingest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
	"danmaku/internal/loadtable"
)

// A fallback node refuses the barrage of a user whose primary is live in
// its load snapshot (421 not_primary, Retry-After 1) and takes it once the
// primary stops reporting; the primary is never refused.
func TestBarrageBoundToPrimary(t *testing.T) {
	const primary, fallback = "http://ingest-0", selfAddr
	f := newFixture(t, func(c *Config) { c.Addr = fallback })
	sign := func(user string, ingests int, addrs ...string) string {
		tok, _, err := f.ring.Sign(auth.Claims{
			Room: room, Role: auth.RoleViewer, Addrs: addrs, Ingests: ingests,
			RegisteredClaims: jwt.RegisteredClaims{Subject: user},
		})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	report := func(addr string) {
		if err := f.table.Report(context.Background(), loadtable.NodeLoad{ID: addr, Kind: loadtable.KindIngest, Addr: addr, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	report(primary)
	report(fallback)
	f.srv.syncOnline(context.Background())

	bound := sign("u1", 2, primary, fallback, "ws://edge-1")
	rec := f.do(http.MethodPost, barragePath(room), bound, `{"text":"hi"}`)
	if rec.Code != http.StatusMisdirectedRequest || errorCode(t, rec) != "not_primary" || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("fallback with a live primary: %d %s, Retry-After %q", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if got := rejected(t, f.reg, "auth", "not_primary"); got != 1 {
		t.Fatalf("rejected{auth,not_primary} = %v", got)
	}
	f.barrage(t, sign("u2", 2, fallback, primary, "ws://edge-1"), "mine") // this node is u2's primary
	// A token signed before ni existed names no audience: refused.
	if rec := f.do(http.MethodPost, barragePath(room), sign("u3", 0, primary, fallback, "ws://edge-1"), `{"text":"old"}`); rec.Code != http.StatusForbidden || errorCode(t, rec) != "wrong_node" {
		t.Fatalf("token without ni: %d %s", rec.Code, rec.Body)
	}

	f.clk.Advance(defaultBindingStale + time.Second) // the primary stopped reporting
	report(fallback)
	f.srv.syncOnline(context.Background())
	f.barrage(t, bound, "primary gone")

	// Every request after the first of a token was answered from the cache.
	tc := f.srv.tokens.(*auth.TokenCache)
	if s := tc.Stats(); s.Hits != 1 || s.Misses != 3 {
		t.Fatalf("token cache %+v", s)
	}
}
