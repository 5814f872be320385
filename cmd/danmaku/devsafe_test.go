package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/testenv"
)

// TestDevRefusesProductionKeysAndBackends: `danmaku dev` with a
// production key in its environment or a real backend refuses to start,
// naming each and the flag that takes the risk. Once its unauthenticated
// GET /v1/dev/ticket minted admin tickets under a production
// DANMAKU_TICKET_KEY.
func TestDevRefusesProductionKeysAndBackends(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a dev that did start stops at once
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"ticket key", map[string]string{"DANMAKU_TICKET_KEY": "a-production-ticket-key-0123456789"}, nil, []string{"DANMAKU_TICKET_KEY"}},
		{"master key", map[string]string{"DANMAKU_MASTER_KEY": strings.Repeat("ab", 32)}, nil, []string{"DANMAKU_MASTER_KEY"}},
		{"service keys", map[string]string{"DANMAKU_GIFT_KEYS": "g", "DANMAKU_ANNOUNCE_KEYS": "a", "DANMAKU_OPERATOR_KEYS": "o"}, nil,
			[]string{"DANMAKU_GIFT_KEYS", "DANMAKU_ANNOUNCE_KEYS", "DANMAKU_OPERATOR_KEYS"}},
		{"redis flag", nil, []string{"-redis", "127.0.0.1:1"}, []string{"-redis"}},
		{"redis env", map[string]string{"DANMAKU_REDIS": "127.0.0.1:1"}, nil, []string{"DANMAKU_REDIS"}},
		{"s3", nil, []string{"-s3-bucket", "segments"}, []string{"-s3-bucket"}},
		{"audit s3", map[string]string{"DANMAKU_AUDIT_S3_BUCKET": "audit"}, nil, []string{"-audit-s3-bucket"}},
		{"rules s3", map[string]string{"DANMAKU_RULES_S3_BUCKET": "rules"}, nil, []string{"-rules-s3-bucket"}},
		{"rules dir", nil, []string{"-rules-dir", "/srv/rules"}, []string{"-rules-dir"}},
		{"all at once", map[string]string{"DANMAKU_TICKET_KEY": "k"}, []string{"-redis", "127.0.0.1:1"}, []string{"DANMAKU_TICKET_KEY", "-redis"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearDanmakuEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			err := runDev(ctx, append(roleArgs(t), tt.args...), &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("dev: %v, want a usage error", err)
			}
			for _, w := range append(tt.want, "-dev-unsafe-backends") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not name %s", err, w)
				}
			}
		})
	}
	t.Run("the flag takes no public key", func(t *testing.T) {
		clearDanmakuEnv(t)
		err := runDev(ctx, append(roleArgs(t), "-dev-unsafe-backends"), &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
		for _, w := range []string{"DANMAKU_TICKET_KEY", "DANMAKU_MASTER_KEY", "DANMAKU_OPERATOR_KEYS", "DANMAKU_GIFT_KEYS"} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("dev -dev-unsafe-backends without keys: %v, want %s named", err, w)
			}
		}
	})
}

// TestDevUnsafeBackends: with -dev-unsafe-backends, dev runs on a real
// Redis with the environment's keys, and nothing public: GET
// /v1/dev/ticket is a coded 404, and the public service key is refused.
func TestDevUnsafeBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis")
	}
	redisAddr := testenv.Redis(t)
	clearDanmakuEnv(t)
	t.Setenv("DANMAKU_TICKET_KEY", "a-production-ticket-key-0123456789")
	t.Setenv("DANMAKU_MASTER_KEY", strings.Repeat("ab", 32))
	t.Setenv("DANMAKU_GIFT_KEYS", "gift-key")
	t.Setenv("DANMAKU_OPERATOR_KEYS", "operator-key")
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, append(roleArgs(t), "-dev-unsafe-backends", "-redis", redisAddr), &out, &testenv.SyncBuffer{})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
	}()
	gslbLine := regexp.MustCompile(`gslb +listening on (\S+)`)
	var base string
	deadline := time.Now().Add(30 * time.Second)
	for base == "" {
		if m := gslbLine.FindStringSubmatch(out.String()); m != nil && strings.Contains(out.String(), "press Ctrl-C") {
			base = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dev ended: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start:\n%s", out.String())
		}
	}
	if strings.Contains(out.String(), "demo:") {
		t.Errorf("dev on real backends offers the demo page:\n%s", out.String())
	}
	get := func(path, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Error.Code
	}
	if st, code := get("/v1/dev/ticket?user=alice&role=admin", ""); st != http.StatusNotFound || code != "not_found" {
		t.Errorf("GET /v1/dev/ticket: %d %q, want 404 not_found", st, code)
	}
	if st, code := get("/v1/admin/events", stack.DevServiceKey); st != http.StatusUnauthorized && st != http.StatusForbidden {
		t.Errorf("the public service key on the operator API: %d %q, want it refused", st, code)
	}
	if st, _ := get("/v1/admin/events", "operator-key"); st != http.StatusOK {
		t.Errorf("the environment's operator key: %d, want 200", st)
	}
}
