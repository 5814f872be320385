package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"danmaku/sdk/wire"
)

// fakeReports is an ingest's report endpoint as the spec has it: 202 for a
// counted report, 200 duplicate for the same (user, message) again, 429
// report_rate past a burst, 400 bad_report for a bad body; the token is
// the user. refuse, when set, answers a request first (status 0: go on).
type fakeReports struct {
	mu     sync.Mutex
	burst  int
	seen   map[string]bool
	taken  map[string]int
	bodies []map[string]any
	paths  []string
	refuse func(token string) (int, string)
}

func (f *fakeReports) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	var b map[string]any
	_ = json.NewDecoder(r.Body).Decode(&b)
	f.bodies, f.paths = append(f.bodies, b), append(f.paths, r.URL.Path)
	answer := func(status int, body string) {
		rw.Header().Set("Content-Type", "application/json")
		if status == http.StatusTooManyRequests {
			rw.Header().Set("Retry-After", "12")
		}
		rw.WriteHeader(status)
		_, _ = rw.Write([]byte(body))
	}
	if f.refuse != nil {
		if status, body := f.refuse(token); status != 0 {
			answer(status, body)
			return
		}
	}
	id, _ := b["id"].(string)
	k, _ := b["k"].(float64)
	reason, _ := b["reason"].(string)
	if id == "" || k < 1 || k > 3 || reason == "" || r.Header.Get("Content-Type") != "application/json" {
		answer(400, `{"error":{"code":"bad_report","message":"bad body"}}`)
		return
	}
	if f.taken[token] >= f.burst {
		answer(429, `{"error":{"code":"report_rate","message":"slow down"}}`)
		return
	}
	f.taken[token]++
	key := fmt.Sprint(token, " ", id, " ", k)
	if f.seen[key] {
		answer(200, `{"ok":true,"duplicate":true}`)
		return
	}
	f.seen[key] = true
	answer(202, `{"ok":true}`)
}

// reportsTo sends the requests of w's ingest to /reports to f instead of
// the harness's ingest, and everything else on.
type reportsTo struct {
	ingest string // host:port
	f      http.Handler
}

func (rt reportsTo) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == rt.ingest && strings.HasSuffix(r.URL.Path, "/reports") {
		rec := httptest.NewRecorder()
		rt.f.ServeHTTP(rec, r)
		return rec.Result(), nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

func newReportWorld(t *testing.T, burst int) (*world, *fakeReports, *Client) {
	t.Helper()
	w := newWorld(t)
	f := &fakeReports{burst: burst, seen: map[string]bool{}, taken: map[string]int{}}
	host := strings.TrimPrefix(w.ingest.URL, "http://")
	c := w.newClient(func(cfg *Config) {
		cfg.NoEdge = true
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: reportsTo{ingest: host, f: f}}
	})
	return w, f, c
}

func TestReportComment(t *testing.T) {
	t.Parallel()
	_, f, c := newReportWorld(t, 3)
	ctx := context.Background()
	if err := c.Report(ctx, "1700000000123-0", wire.KindBarrage, ReportSpam); err != nil {
		t.Fatal(err)
	}
	// The same report again: the ingest's 200 duplicate is success.
	if err := c.Report(ctx, "1700000000123-0", wire.KindBarrage, ReportAbuse); err != nil {
		t.Fatalf("a duplicate: %v", err)
	}
	if err := c.Report(ctx, "1700000000100-2", wire.KindGift, ReportIllegal); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if len(f.bodies) != 3 || f.paths[0] != "/v1/rooms/r1/reports" || f.bodies[0]["id"] != "1700000000123-0" || f.bodies[0]["k"] != float64(1) || f.bodies[0]["reason"] != "spam" ||
		f.bodies[2]["k"] != float64(2) || len(f.seen) != 2 {
		t.Errorf("requests %v %v", f.paths, f.bodies)
	}
	f.mu.Unlock()
	// Over the allowance: the ingest's answer, with its Retry-After, and
	// no retry.
	err := c.Report(ctx, "1700000000124-0", wire.KindBarrage, ReportOther)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Code != "report_rate" || ae.RetryAfter != 12*time.Second {
		t.Fatalf("over the allowance: %v", err)
	}
	f.mu.Lock()
	if len(f.bodies) != 4 {
		t.Errorf("%d requests, want 4: a refused report is not retried", len(f.bodies))
	}
	f.mu.Unlock()
}

func TestReportCommentRefusedLocally(t *testing.T) {
	t.Parallel()
	_, f, c := newReportWorld(t, 10)
	for name, tc := range map[string]struct {
		id     string
		kind   wire.Kind
		reason string
	}{
		"id":     {"yesterday", wire.KindBarrage, ReportSpam},
		"kind":   {"1-0", 9, ReportSpam},
		"reason": {"1-0", wire.KindBarrage, "boring"},
	} {
		if err := c.Report(context.Background(), tc.id, tc.kind, tc.reason); !errors.Is(err, ErrBadReport) {
			t.Errorf("%s: %v, want ErrBadReport", name, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) != 0 {
		t.Errorf("%d requests sent for refused reports", len(f.bodies))
	}
}

// TestReportCommentRejoins: a refused token is renewed once, as Send's.
func TestReportCommentRejoins(t *testing.T) {
	t.Parallel()
	_, f, c := newReportWorld(t, 10)
	f.mu.Lock()
	f.refuse = func(token string) (int, string) {
		if token == "tok-1" {
			return 401, `{"error":{"code":"bad_token","message":"expired"}}`
		}
		return 0, ""
	}
	f.mu.Unlock()
	if err := c.Report(context.Background(), "1-0", wire.KindBarrage, ReportSpam); err != nil {
		t.Fatal(err)
	}
	if got := c.Entry().Token; got != "tok-2" {
		t.Errorf("token after re-join = %q, want tok-2", got)
	}
	// A refusal that is the same everywhere is returned.
	f.mu.Lock()
	f.refuse = func(string) (int, string) { return 403, `{"error":{"code":"wrong_room","message":"no"}}` }
	f.mu.Unlock()
	var ae *APIError
	if err := c.Report(context.Background(), "1-0", wire.KindBarrage, ReportSpam); !errors.As(err, &ae) || ae.Code != "wrong_room" {
		t.Fatalf("%v, want the 403", err)
	}
}
