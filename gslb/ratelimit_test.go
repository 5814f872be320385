package gslb_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/clock"
	"danmaku/internal/ratelimit"
)

func entryLimiter(t *testing.T, doc string) *ratelimit.Limiter {
	t.Helper()
	r, err := ratelimit.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	// A fake clock: the windows do not move while a test runs, however slow
	// the machine (Retry-After is asserted to the second).
	lim, err := ratelimit.New(ratelimit.Config{Rules: r, Logger: discard, Clock: clock.NewFake(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

type gradedEntry struct {
	Token     string `json:"token"`
	RefreshMs int64  `json:"refresh_ms"`
	Degraded  bool   `json:"degraded"`
	Ingest    []string
}

// Near a rule's limit the entry answers the user's last allocation again
// (same addresses, same token: nothing allocated or signed) with a
// stretched refresh hint; over it, 429 rate_limited with Retry-After.
func TestEntryGradedNearLimit(t *testing.T) {
	// 10 entries a minute per user; near from the 6th (more than half).
	lim := entryLimiter(t, `{"rules":[{"name":"entry-user","route":"GET /v1/entry","key":"user","algorithm":"window","limit":10,"per":"1m","near":0.5}]}`)
	f := newEntryFixtureWith(t, true, gslb.AllocatorConfig{}, gslb.ServerConfig{RateLimit: lim}, healthyNodes()...)
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	var got []gradedEntry
	for range 10 {
		rec := f.get("/v1/entry?room=r1", ticket)
		if rec.Code != http.StatusOK {
			t.Fatalf("entry %d: %d %s", len(got), rec.Code, rec.Body)
		}
		var e gradedEntry
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	life := (10 * time.Minute).Milliseconds() // the keyring's token lifetime
	for i, e := range got {
		near := i >= 5
		if e.Degraded != near {
			t.Fatalf("entry %d: degraded %v, want %v", i, e.Degraded, near)
		}
		switch {
		case !near && (e.RefreshMs < life*79/100 || e.RefreshMs > life*80/100):
			t.Fatalf("entry %d: refresh_ms %d, want 80 %% of %d", i, e.RefreshMs, life)
		case near && (e.RefreshMs < life*89/100 || e.RefreshMs > life*95/100):
			t.Fatalf("entry %d: refresh_ms %d, want 90-95 %% of %d", i, e.RefreshMs, life)
		case near && e.Token != got[4].Token:
			t.Fatalf("entry %d: a new token near the limit, want the last answer's", i)
		}
	}
	if got[1].Token == got[0].Token {
		t.Fatal("tokens were reused under the limit")
	}
	rec := f.get("/v1/entry?room=r1", ticket)
	if rec.Code != http.StatusTooManyRequests || errorCode(t, rec) != "rate_limited" {
		t.Fatalf("over the limit: %d %s", rec.Code, rec.Body)
	}
	// The window's oldest entry leaves it in about a minute; the answer
	// waits that, stretched by up to as much again.
	if ra, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || ra < 59 || ra > 120 {
		t.Fatalf("Retry-After %q, want 59-120", rec.Header().Get("Retry-After"))
	}
	if rec := f.get("/v1/entry?room=r1", mintTicket(t, ticketKey, "u2", auth.Ticket{}, time.Hour)); rec.Code != http.StatusOK {
		t.Fatalf("another user: %d", rec.Code)
	}
	if n := entriesCounter(t, f.reg, "degraded"); n != 5 {
		t.Fatalf("entries{degraded} = %v, want 5", n)
	}
}

// A forged ticket spends nobody's budget: user rules count verified
// subjects only.
func TestEntryUserRuleNeedsAVerifiedTicket(t *testing.T) {
	lim := entryLimiter(t, `{"rules":[{"name":"entry-user","route":"GET /v1/entry","key":"user","algorithm":"window","limit":1,"per":"1m"}]}`)
	f := newEntryFixtureWith(t, true, gslb.AllocatorConfig{}, gslb.ServerConfig{RateLimit: lim}, healthyNodes()...)
	forged := mintTicket(t, []byte("not-the-ticket-key-0123456789abc"), "victim", auth.Ticket{}, time.Hour)
	for range 3 {
		if rec := f.get("/v1/entry?room=r1", forged); rec.Code != http.StatusUnauthorized {
			t.Fatalf("forged ticket: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := f.get("/v1/entry?room=r1", mintTicket(t, ticketKey, "victim", auth.Ticket{}, time.Hour)); rec.Code != http.StatusOK {
		t.Fatalf("the victim after forged tickets: %d %s", rec.Code, rec.Body)
	}
}
