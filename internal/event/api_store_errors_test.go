package event_test

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

	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
)

// errStoreFault is a backend error whose text names internals no client
// should see.
var errStoreFault = errors.New("dial tcp 10.1.2.3:6379: connect: connection refused")

// downStore fails every call.
type downStore struct{}

func (downStore) Create(context.Context, event.Event) error { return errStoreFault }
func (downStore) Update(context.Context, event.Event) error { return errStoreFault }
func (downStore) Get(context.Context, string) (event.Event, error) {
	return event.Event{}, errStoreFault
}
func (downStore) List(context.Context) ([]event.Event, error) { return nil, errStoreFault }
func (downStore) Delete(context.Context, string) error        { return errStoreFault }

// TestAPIStoreErrors: a failing events store is a 503 backend_unavailable
// with a fixed message; the store's error goes to the log, with the
// operation, and never into the answer.
func TestAPIStoreErrors(t *testing.T) {
	var logs bytes.Buffer // handlers run within ServeHTTP: no concurrent writes
	api := &event.API{Store: downStore{}, Keys: []string{"op"}, Clock: clock.NewFake(t0), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb"})
	api.Register(e)
	body, err := json.Marshal(valid())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ method, path, body, op string }{
		{"GET", "/v1/admin/events", "", "list events"},
		{"POST", "/v1/admin/events", string(body), "check rooms"},
		{"GET", "/v1/admin/events/xmas", "", "get event"},
		{"PUT", "/v1/admin/events/xmas", string(body), "get event"},
		{"POST", "/v1/admin/events/xmas/end", "", "get event"},
		{"DELETE", "/v1/admin/events/xmas", "", "get event"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			logs.Reset()
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer op")
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			var got struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusServiceUnavailable ||
				got.Error.Code != "backend_unavailable" || got.Error.Message == "" || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("%d %s (Retry-After %q), want a coded 503 backend_unavailable", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
			}
			if strings.Contains(rec.Body.String(), "10.1.2.3") || strings.Contains(rec.Body.String(), "refused") {
				t.Errorf("the store's error reaches the client: %s", rec.Body)
			}
			if l := logs.String(); !strings.Contains(l, errStoreFault.Error()) || !strings.Contains(l, `op="`+tt.op+`"`) {
				t.Errorf("log %q: want the error and op=%q", l, tt.op)
			}
		})
	}
}
