package slicer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"danmaku/internal/httpx"
	"danmaku/internal/redisx/redistest"
)

func TestSettingsStores(t *testing.T) {
	for name, newStore := range map[string]func(t *testing.T) SettingsStore{
		"memory": func(*testing.T) SettingsStore { return &MemorySettings{} },
		"redis":  func(t *testing.T) SettingsStore { return NewRedisSettings(redistest.Client(t)) },
		"redis-cluster": func(t *testing.T) SettingsStore {
			return NewRedisSettings(redistest.Cluster(t))
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := newStore(t)
			if got, err := st.Load(ctx); err != nil || got != nil {
				t.Fatalf("empty store: %v, %v", got, err)
			}
			want := Settings{Budget: 40, Shares: Shares{0.25, 0.25, 0.25, 0.25}}
			if err := st.Save(ctx, want); err != nil {
				t.Fatal(err)
			}
			if got, err := st.Load(ctx); err != nil || *got != want {
				t.Fatalf("Load = %v, %v", got, err)
			}
		})
	}
}

func TestAdminBudgetReachesOtherSlicers(t *testing.T) {
	shared := &MemorySettings{}
	a := newRig(t, Config{Settings: shared}).s
	b := newRig(t, Config{Settings: shared}).s
	e := httpx.NewEngine(httpx.EngineConfig{Role: "slicer"})
	a.RegisterAdmin(e, []string{"k"})
	do := func(method, body, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/v1/admin/budget", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		name, method, body, key string
		status                  int
		// message, for a 400 bad_settings: a part of its message.
		message string
	}{
		{"no key", "GET", "", "", http.StatusUnauthorized, ""},
		{"wrong key", "PUT", `{"budget":10,"shares":[0.25,0.25,0.25,0.25]}`, "x", http.StatusUnauthorized, ""},
		{"bad json", "PUT", `{"budget":`, "k", http.StatusBadRequest, ""},
		{"shares off", "PUT", `{"budget":10,"shares":[0.5,0.5,0.5,0]}`, "k", http.StatusBadRequest, "shares must sum to 1"},
		{"zero budget", "PUT", `{"budget":0,"shares":[0.25,0.25,0.25,0.25]}`, "k", http.StatusBadRequest, "budget must be 1-100000"},
		{"budget too large", "PUT", `{"budget":100001,"shares":[0.25,0.25,0.25,0.25]}`, "k", http.StatusBadRequest, "budget must be 1-100000"},
		{"share out of range", "PUT", `{"budget":10,"shares":[1.5,-0.5,0,0]}`, "k", http.StatusBadRequest, "shares[0] must be from 0 to 1"},
		// Once padded to [1,0,0,0] and cut to four, answered 200.
		{"one share", "PUT", `{"budget":10,"shares":[1]}`, "k", http.StatusBadRequest, "exactly 4"},
		{"five shares", "PUT", `{"budget":10,"shares":[0.1,0.3,0.2,0.4,0]}`, "k", http.StatusBadRequest, "no fewer (got 5)"},
		{"no shares", "PUT", `{"budget":10}`, "k", http.StatusBadRequest, "(got 0)"},
		{"ok", "PUT", `{"budget":30,"shares":[0.1,0.2,0.3,0.4]}`, "k", http.StatusOK, ""},
		{"read", "GET", "", "k", http.StatusOK, ""},
	} {
		w := do(c.method, c.body, c.key)
		if w.Code != c.status {
			t.Fatalf("%s: %d %s", c.name, w.Code, w.Body)
		}
		if c.message != "" && (!strings.Contains(w.Body.String(), `"code":"bad_settings"`) || !strings.Contains(w.Body.String(), c.message)) {
			t.Fatalf("%s: %s, want bad_settings saying %q", c.name, w.Body, c.message)
		}
	}
	if a.Current().Budget != 30 {
		t.Fatal("not applied where it was set")
	}
	b.syncSettings(context.Background())
	if got := b.Current(); got.Budget != 30 || got.Shares != (Shares{0.1, 0.2, 0.3, 0.4}) {
		t.Fatalf("other slicer has %+v", got)
	}
}
