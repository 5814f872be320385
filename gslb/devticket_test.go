package gslb

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"danmaku/auth"
	"danmaku/internal/httpx"
)

func TestDevTickets(t *testing.T) {
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb"})
	RegisterDevTickets(e, auth.DevTicketKey)
	v, err := auth.NewTicketVerifier(auth.DevTicketKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The subtest names are the queries: cut the long ones.
	name := func(q string) string {
		if len(q) > 60 {
			return q[:60]
		}
		return q
	}
	tests := []struct {
		query  string
		status int
		code   string
		role   string
	}{
		{"user=alice&nick=Alice", http.StatusOK, "", auth.RoleViewer},
		{"user=h1&role=host", http.StatusOK, "", auth.RoleHost},
		{"", http.StatusBadRequest, "bad_user", ""},
		{"user=a%20b", http.StatusBadRequest, "bad_user", ""},
		{"user=alice&role=god", http.StatusBadRequest, "bad_role", ""},
		{"user=alice&nick=%ff", http.StatusBadRequest, "bad_nick", ""},
		{"user=%E7%94%A8%E6%88%B742&nick=%E5%B0%8F%E6%98%8E%E2%80%AE&av=a7", http.StatusOK, "", auth.RoleViewer},
		{"user=alice&av=https%3A%2F%2Fimg.example%2Fa.png", http.StatusOK, "", auth.RoleViewer},
		{"user=u%001", http.StatusBadRequest, "bad_user", ""},
		{"user=u1%0A", http.StatusBadRequest, "bad_user", ""},
		{"user=u1%E2%80%AE", http.StatusBadRequest, "bad_user", ""},
		{"user=" + strings.Repeat("u", 65), http.StatusBadRequest, "bad_user", ""},
		{"user=alice&nick=" + strings.Repeat("n", 129), http.StatusBadRequest, "bad_nick", ""},
		{"user=alice&av=" + strings.Repeat("a", 2500), http.StatusBadRequest, "bad_avatar", ""},
		{"user=alice&av=http%3A%2F%2Fimg.example%2Fa.png", http.StatusBadRequest, "bad_avatar", ""},
	}
	for _, tt := range tests {
		t.Run(name(tt.query), func(t *testing.T) {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, DevTicketPath+"?"+tt.query, nil))
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			var body struct {
				Ticket string
				Error  struct{ Code string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if tt.code != "" {
				if body.Error.Code != tt.code {
					t.Fatalf("code %q, want %q", body.Error.Code, tt.code)
				}
				return
			}
			tk, err := v.Verify(body.Ticket)
			if err != nil || tk.Role != tt.role {
				t.Fatalf("ticket %+v, %v", tk, err)
			}
			if strings.ContainsRune(tk.Nick, '\u202e') {
				t.Fatalf("nick %q keeps a bidi override", tk.Nick)
			}
		})
	}
}
