package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestJoinRefusedStopsRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	c, err := New(Config{EntryURL: w.entry.URL, Room: testRoom, Ticket: "wrong", Clock: w.clk, FirstJoinJitter: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(context.Background())
	var ae *APIError
	if !errors.Is(err, ErrJoin) || !errors.As(err, &ae) || ae.Code != "bad_ticket" || ae.Status != 401 {
		t.Fatalf("Run = %v, want ErrJoin with the server's code", err)
	}
	if _, ok := <-c.Messages(); ok {
		t.Error("Messages not closed after Run returned")
	}
	if err := c.Send(context.Background(), "x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Run = %v, want ErrClosed", err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
}

// A 503 with Retry-After is honoured (on the fake clock), then the join
// succeeds.
func TestJoinRetryAfter(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.entryAnswer = func(n int) (int, http.Header, string) {
		if n == 0 {
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"2"}}, `{"error":{"code":"unavailable","message":"busy"}}`
		}
		return 0, nil, ""
	}
	w.run()
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.lock(func() {
		if len(w.entryAt) != 2 {
			t.Fatalf("%d entry requests, want 2", len(w.entryAt))
		}
		if d := w.entryAt[1].Sub(w.entryAt[0]); d < 2*time.Second {
			t.Errorf("retried after %v of fake time, want ≥ Retry-After 2s", d)
		}
	})
	if e := c.Entry(); e.Token != "tok-2" || e.CDN != w.cdn.URL+"/" || len(e.Ingest) != 1 {
		t.Errorf("entry = %+v", e)
	}
}

// The token is refreshed before it expires, and the clock offset follows
// the server.
func TestTokenRefreshAndOffset(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.tokenTTL = 10 * time.Second
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	if d := c.serverNow().Sub(w.serverNow()); d < 0 || d > 10*time.Millisecond {
		t.Errorf("server time estimate off by %v", d)
	}
	w.run()
	eventually(t, "a token refresh", func() bool { return c.Entry().Token == "tok-2" })
	w.lock(func() {
		if d := w.entryAt[1].Sub(w.entryAt[0]); d < 7*time.Second || d >= 10*time.Second {
			t.Errorf("refreshed %v after joining (fake time), want before the 10s expiry, at about 8s", d)
		}
	})
}

// The gslb's refresh hint, near a rate limit, replaces the 80 % rule.
func TestTokenRefreshHint(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.tokenTTL = 20 * time.Second
	w.refreshMs = 9_000
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	w.run()
	eventually(t, "a token refresh", func() bool { return c.Entry().Token == "tok-2" })
	w.lock(func() {
		if d := w.entryAt[1].Sub(w.entryAt[0]); d < 9*time.Second || d >= 12*time.Second {
			t.Errorf("refreshed %v after joining (fake time), want at the 9s hint, not the 16s rule", d)
		}
	})
}

func TestRefreshAfter(t *testing.T) {
	const now = 1_700_000_000_000
	for _, tc := range []struct {
		name              string
		lifeMs, refreshMs int64
		want              time.Duration
	}{
		{"no hint: 80 % of the life", 600_000, 0, 480 * time.Second},
		{"hint", 600_000, 561_000, 561 * time.Second},
		{"hint past the token: ignored", 600_000, 600_000, 480 * time.Second},
		{"huge hint: ignored", 600_000, 1 << 62, 480 * time.Second},
		{"negative hint: ignored", 600_000, -1, 480 * time.Second},
		{"tiny hint: floored", 600_000, 10, minTokenRefresh},
		{"tiny life: floored", 1_000, 0, minTokenRefresh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Entry{ServerTimeMs: now, TokenExpiresMs: now + tc.lifeMs, RefreshMs: tc.refreshMs}
			if got := refreshAfter(&e); got != tc.want {
				t.Errorf("refreshAfter = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadAPIError(t *testing.T) {
	for _, tc := range []struct {
		name, body, retryAfter string
		status                 int
		code                   string
		wait                   time.Duration
		temporary              bool
	}{
		{"coded", `{"error":{"code":"rate_limited","message":"slow down"}}`, "3", 429, "rate_limited", 3 * time.Second, true},
		{"no body", ``, "", 502, "http_502", 0, true},
		{"junk", `<html>`, "soon", 403, "http_403", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}, Body: io.NopCloser(stringsReader(tc.body))}
			if tc.retryAfter != "" {
				resp.Header.Set("Retry-After", tc.retryAfter)
			}
			e := readAPIError(resp)
			if e.Status != tc.status || e.Code != tc.code || e.RetryAfter != tc.wait || e.temporary() != tc.temporary {
				t.Errorf("got %+v (temporary %v)", e, e.temporary())
			}
		})
	}
}

// TestClockRefined: a join whose round trip was long (a busy gslb) leaves a
// wide clock margin, which every poll would wait; the client samples
// /v1/time until the margin is tight.
func TestClockRefined(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.entrySlow.Store(int64(2 * time.Second))
	w.run()
	c := w.newClient(func(cfg *Config) { cfg.NoEdge = true })
	if m := c.Stats().ClockMarginMs; m < 1000 {
		t.Fatalf("margin after a 2 s join = %d ms, want about 1000", m)
	}
	// The world's clock runs 10 times real time, so even a sample slowed
	// by a busy machine is far tighter than the join's.
	eventually(t, "the margin to tighten", func() bool { return c.Stats().ClockMarginMs < 500 })
	w.lock(func() {
		if w.timeHits == 0 || w.timeHits > clockSamples {
			t.Fatalf("%d time samples, want 1-%d", w.timeHits, clockSamples)
		}
	})
	// And the estimate is right: server time to within the margin.
	margin := time.Duration(c.Stats().ClockMarginMs) * time.Millisecond
	if d := c.serverNow().Sub(w.serverNow()); d < -margin || d > margin {
		t.Fatalf("server clock estimate off by %v, beyond its margin %v", d, margin)
	}
}

// TestUnknownSegmentDuration: an entry naming a segment duration this
// client has no key scheme for stops Run at once with a clear error, instead
// of polling keys that are never written.
func TestUnknownSegmentDuration(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.entryAnswer = func(int) (int, http.Header, string) {
		return http.StatusOK, nil, fmt.Sprintf(`{"room":%q,"user":"alice","role":"viewer","ingest":["http://x"],"edge":[],"cdn":"http://cdn/","token":"t","token_expires_ms":%d,"server_time_ms":%d,"segment_ms":300,"publish_delay_ms":50}`,
			testRoom, w.serverNow().Add(time.Hour).UnixMilli(), w.serverNow().UnixMilli())
	}
	w.run()
	c := w.buildClient(nil)
	err := c.Run(context.Background())
	if !errors.Is(err, ErrJoin) || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "segment_ms 300") {
		t.Fatalf("Run = %v, want ErrJoin wrapping ErrUnsupported naming segment_ms 300", err)
	}
	w.lock(func() {
		if w.entryHits != 1 {
			t.Fatalf("%d entry requests, want 1 (no retry can help)", w.entryHits)
		}
	})
}
