package ingest_test

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
	"time"

	"danmaku/ingest"
	"danmaku/internal/httpx"
)

// errStoreFault is a backend error whose text names internals no client
// should see.
var errStoreFault = errors.New("dial tcp 10.1.2.3:6379: connect: connection refused")

type downBanStore struct{ ingest.BanStore }

func (downBanStore) Put(context.Context, ingest.Ban) error              { return errStoreFault }
func (downBanStore) Delete(context.Context, string, string) error       { return errStoreFault }
func (downBanStore) User(context.Context, string) ([]ingest.Ban, error) { return nil, errStoreFault }
func (downBanStore) List(context.Context) ([]ingest.Ban, int64, error)  { return nil, 0, errStoreFault }
func (downBanStore) Version(context.Context) (int64, error)             { return 0, errStoreFault }
func (downBanStore) Purge(context.Context, time.Time) (int, error)      { return 0, errStoreFault }

type downLotteryStore struct{ ingest.LotteryStore }

func (downLotteryStore) Running(context.Context) ([]ingest.Lottery, int64, error) {
	return nil, 0, errStoreFault
}

func (downLotteryStore) Start(context.Context, ingest.Lottery) (ingest.Lottery, error) {
	return ingest.Lottery{}, errStoreFault
}

func (downLotteryStore) Stop(context.Context, string, string, time.Time) (ingest.Lottery, error) {
	return ingest.Lottery{}, errStoreFault
}

func (downLotteryStore) Get(context.Context, string, string) (ingest.Lottery, error) {
	return ingest.Lottery{}, errStoreFault
}

// TestAdminStoreErrors: a failing bans or lottery store is a 503
// backend_unavailable with a fixed message; the store's error goes to the
// log, with the operation, and never into the answer.
func TestAdminStoreErrors(t *testing.T) {
	var logs bytes.Buffer // handlers run within ServeHTTP: no concurrent writes
	log := slog.New(slog.NewTextHandler(&logs, nil))
	e := httpx.NewEngine(httpx.EngineConfig{Role: "ingest", Logger: quiet})
	(&ingest.BanAPI{Store: downBanStore{}, Keys: []string{"op"}, Logger: log}).Register(e)
	(&ingest.LotteryAPI{Store: downLotteryStore{}, Keys: []string{"op"}, Logger: log}).Register(e)

	tests := []struct{ method, path, body, op string }{
		{"GET", "/v1/admin/bans", "", "list bans"},
		{"GET", "/v1/admin/bans/alice", "", "read bans"},
		{"PUT", "/v1/admin/bans/alice", `{"room":"r1"}`, "put ban"},
		{"DELETE", "/v1/admin/bans/alice", "", "delete ban"},
		{"POST", "/v1/admin/rooms/r1/lotteries", `{"id":"l1","keyword":"k","duration_seconds":60}`, "start lottery"},
		{"GET", "/v1/admin/rooms/r1/lotteries", "", "list lotteries"},
		{"GET", "/v1/admin/rooms/r1/lotteries/l1", "", "get lottery"},
		{"POST", "/v1/admin/rooms/r1/lotteries/l1/stop", "", "stop lottery"},
		{"GET", "/v1/admin/rooms/r1/lotteries/l1/entrants", "", "get lottery"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			logs.Reset()
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer op")
			if tt.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
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
