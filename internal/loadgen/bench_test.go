package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"danmaku/sdk/wire"
)

// BenchmarkLoadgenOffer measures what one generator process can send
// when the server costs nothing: a stub gslb and ingest in this process
// that answer at once. Each iteration is a 2 s unthrottled run offering
// far more than it can send; "sent/s" is what it reached, "not_offered/s"
// what it had to leave out. Against a real stack the server shares the
// machine, so expect less (docs/loadgen.md has a run against dev).
func BenchmarkLoadgenOffer(b *testing.B) {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case r.URL.Path == "/v1/entry":
			now := time.Now().UnixMilli()
			_ = json.NewEncoder(w).Encode(wire.Entry{Room: "demo", Ingest: []string{srv.URL}, Token: "t",
				ServerTimeMs: now, TokenExpiresMs: now + 600_000, SegmentMs: 1000, PublishDelayMs: 50})
		case strings.HasSuffix(r.URL.Path, "/barrage"):
			_, _ = io.WriteString(w, `{"ok":true}`)
		default: // /metrics: nothing to read
		}
	}))
	defer srv.Close()
	var sent, notOffered, secs float64
	for b.Loop() {
		g, err := New(Config{GSLB: srv.URL, Users: 1000, Rate: 200_000, Unthrottled: true, Duration: 2 * time.Second,
			GiftRate: -1, Pollers: -1, Concurrency: 512})
		if err != nil {
			b.Fatal(err)
		}
		rep, err := g.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Barrage.Errors) > 0 {
			b.Fatalf("errors: %v", rep.Barrage.Errors)
		}
		sent += float64(rep.Barrage.Attempted)
		notOffered += float64(rep.Barrage.NotOffered)
		secs += rep.Run.LoadSeconds
	}
	b.ReportMetric(sent/secs, "sent/s")
	b.ReportMetric(notOffered/secs, "not_offered/s")
}
