package slicer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"danmaku/internal/httpx"
)

// downSettings fails every call with an error whose text names internals
// no client should see.
type downSettings struct{}

var errSettingsDown = errors.New("dial tcp 10.1.2.3:6379: connect: connection refused")

func (downSettings) Load(context.Context) (*Settings, error) { return nil, errSettingsDown }
func (downSettings) Save(context.Context, Settings) error    { return errSettingsDown }

// TestAdminBudgetStoreError: a settings store that fails is a 503
// backend_unavailable with a fixed message; the store's error goes to the
// log and never into the answer, and nothing is applied.
func TestAdminBudgetStoreError(t *testing.T) {
	var logs bytes.Buffer // handlers run within ServeHTTP: no concurrent writes
	s := newRig(t, Config{Settings: downSettings{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}).s
	before := s.Current()
	e := httpx.NewEngine(httpx.EngineConfig{Role: "slicer"})
	s.RegisterAdmin(e, []string{"k"})
	r := httptest.NewRequest("PUT", "/v1/admin/budget", strings.NewReader(`{"budget":30,"shares":[0.1,0.2,0.3,0.4]}`))
	r.Header.Set("Authorization", "Bearer k")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	var got struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusServiceUnavailable ||
		got.Error.Code != "backend_unavailable" || got.Error.Message == "" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("%d %s (Retry-After %q), want a coded 503 backend_unavailable", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	if strings.Contains(w.Body.String(), "10.1.2.3") || strings.Contains(w.Body.String(), "refused") {
		t.Errorf("the store's error reaches the client: %s", w.Body)
	}
	if l := logs.String(); !strings.Contains(l, errSettingsDown.Error()) {
		t.Errorf("log %q: want the store's error", l)
	}
	if s.Current() != before {
		t.Errorf("applied although not saved: %+v", s.Current())
	}
}
