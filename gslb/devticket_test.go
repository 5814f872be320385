package gslb

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
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
		})
	}
}
