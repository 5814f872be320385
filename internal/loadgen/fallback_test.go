package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/httpx"
	"danmaku/sdk/wire"
)

// A sender whose first ingest could not be reached moves to the next
// address, and when that fallback answers 421 not_primary (the user's own
// node is live) it sends the same comment to the first address again, as
// the SDK does — rather than staying on the fallback and counting every
// later comment as refused.
func TestBarrageBackToPrimary(t *testing.T) {
	var primaryCalls, primaryOK, fallbackCalls atomic.Int64
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !strings.HasSuffix(r.URL.Path, "/barrage") {
			return // the generator also scrapes the nodes' /metrics
		}
		if primaryCalls.Add(1) == 1 {
			// The first post finds the primary unreachable: the connection
			// is dropped without an answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		primaryOK.Add(1)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer primary.Close()
	fallback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !strings.HasSuffix(r.URL.Path, "/barrage") {
			return
		}
		fallbackCalls.Add(1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_, _ = io.WriteString(w, `{"error":{"code":"not_primary","message":"send to the first ingest address"}}`)
	}))
	defer fallback.Close()
	gslb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/entry" {
			now := time.Now().UnixMilli()
			_ = json.NewEncoder(w).Encode(wire.Entry{Room: "demo", Ingest: []string{primary.URL, fallback.URL}, Token: "t",
				ServerTimeMs: now, TokenExpiresMs: now + 600_000, SegmentMs: 1000, PublishDelayMs: 50})
		}
	}))
	defer gslb.Close()

	g, err := New(Config{GSLB: gslb.URL, Users: 1, Rate: 20, Unthrottled: true, Duration: time.Second,
		GiftRate: -1, Pollers: -1, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := g.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := fallbackCalls.Load(); n != 1 {
		t.Errorf("the fallback got %d posts, want 1: after its 421 the sender goes back to the primary", n)
	}
	if rep.Barrage.OK != primaryOK.Load() || rep.Barrage.OK < 2 {
		t.Errorf("OK %d, primary answered %d: the comment refused by the fallback and the later ones go to the primary", rep.Barrage.OK, primaryOK.Load())
	}
	var netErrs int64
	for k, v := range rep.Barrage.Errors {
		if strings.HasPrefix(k, "network") {
			netErrs += v
		}
	}
	if netErrs != 1 || rep.Barrage.Errors["421 not_primary"] != 1 {
		t.Errorf("errors %v, want one network error and one 421 not_primary", rep.Barrage.Errors)
	}
}

// The generator closes an idle connection before the node does: at equal
// idle timeouts a node closed connections as senders took them, failing
// comments with eof (net/http retries no POST), each followed by a 421
// not_primary from the fallback the sender moved to.
func TestIdleConnClosedByClientFirst(t *testing.T) {
	g, err := New(Config{GSLB: "http://gslb", Room: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := g.hc.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport %T", g.hc.Transport)
	}
	if server := httpx.NewServer(nil, 0).IdleTimeout; tr.IdleConnTimeout <= 0 || tr.IdleConnTimeout >= server {
		t.Errorf("generator keeps idle connections %v, the nodes %v: want the generator's shorter", tr.IdleConnTimeout, server)
	}
}
