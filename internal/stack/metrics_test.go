package stack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

// TestMetricsListener: with MetricsAddr the process's metrics — every
// role's — are served there alone, and each role's own port, the one
// clients reach, answers /metrics with the coded 404 of any unknown path.
func TestMetricsListener(t *testing.T) {
	st := stacktest.Start(t, stack.Config{MetricsAddr: "127.0.0.1:0"})
	mu := st.URLs[stack.MetricsListener]
	if mu == "" {
		t.Fatal("no metrics listener URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func(u string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	status, body := get(mu + "/metrics")
	if status != http.StatusOK {
		t.Fatalf("metrics listener /metrics: %d %s", status, body)
	}
	// One registry per process: the edge's, the ingest's and the gslb's
	// series all come from the one port.
	for _, family := range []string{"danmaku_edge_", "danmaku_ingest_", "danmaku_gslb_", "go_goroutines"} {
		if !strings.Contains(body, family) {
			t.Errorf("metrics listener serves no %s series", family)
		}
	}
	for _, role := range stack.AllRoles {
		base := strings.Replace(strings.TrimSuffix(st.URLs[role], "/v1/ws"), "ws://", "http://", 1)
		status, body := get(base + "/metrics")
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); status != http.StatusNotFound || err != nil || e.Error.Code != "not_found" {
			t.Errorf("%s's own port answers /metrics %d %q, want 404 not_found", role, status, body)
		}
		if status, _ := get(base + "/healthz"); status != http.StatusOK {
			t.Errorf("%s's /healthz: %d", role, status)
		}
	}
}
