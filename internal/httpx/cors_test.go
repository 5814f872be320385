package httpx

import (
	"encoding/json"
	"github.com/gin-gonic/gin"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestParseOrigins(t *testing.T) {
	for _, bad := range []string{"example.com", "ftp://x.test", "http://", "http://x.test/path", "http://x.test?q", "http://u@x.test"} {
		if _, err := ParseOrigins([]string{bad}); err == nil {
			t.Errorf("ParseOrigins(%q) accepted", bad)
		}
	}
	o, err := ParseOrigins([]string{" https://App.test ", "", "http://127.0.0.1:7700/"})
	if err != nil {
		t.Fatal(err)
	}
	for origin, want := range map[string]bool{
		"":                      true, // a native client
		"https://app.test":      true,
		"https://APP.test":      true,
		"http://app.test":       false,
		"http://127.0.0.1:7700": true,
		"http://127.0.0.1:7701": false,
		"null":                  false,
	} {
		if got := o.Allowed(origin); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", origin, got, want)
		}
	}
	all, _ := ParseOrigins([]string{"*"})
	if !all.Allowed("https://anything.test") || all.Empty() {
		t.Error("* does not allow every origin")
	}
	if none, _ := ParseOrigins(nil); !none.Empty() || none.Allowed("https://app.test") {
		t.Error("the zero list allows a page")
	}
}

// TestCORS: preflights and CORS headers for allowed origins on the routes
// browsers call (CORSRoutes); a preflight to any other route is a coded
// 403 cors_not_allowed, whatever the origin, and an answer there carries
// no CORS header (gifts and operator APIs were granted CORS).
func TestCORS(t *testing.T) {
	allowed, _ := ParseOrigins([]string{"https://app.test"})
	all, _ := ParseOrigins([]string{"*"})
	tests := []struct {
		name    string
		cors    *Origins
		path    string
		method  string
		origin  string
		status  int
		code    string // coded error expected, "" for none
		allowed bool   // Access-Control-Allow-Origin set to origin
	}{
		{"preflight from an allowed page", &allowed, "/v1/rooms/demo/thing", http.MethodOptions, "https://app.test", http.StatusNoContent, "", true},
		{"preflight from a foreign page", &allowed, "/v1/rooms/demo/thing", http.MethodOptions, "https://evil.test", http.StatusForbidden, CodeForbidden, false},
		{"post from an allowed page", &allowed, "/v1/rooms/demo/thing", http.MethodPost, "https://app.test", http.StatusOK, "", true},
		{"post from a foreign page: served, no CORS headers", &allowed, "/v1/rooms/demo/thing", http.MethodPost, "https://evil.test", http.StatusOK, "", false},
		{"native client", &allowed, "/v1/rooms/demo/thing", http.MethodPost, "", http.StatusOK, "", false},
		{"empty list: preflight refused with a code", &Origins{}, "/v1/rooms/demo/thing", http.MethodOptions, "https://app.test", http.StatusForbidden, CodeForbidden, false},
		{"no CORS at all: preflight is a coded 405", nil, "/v1/rooms/demo/thing", http.MethodOptions, "https://app.test", http.StatusMethodNotAllowed, CodeNoMethod, false},
		{"operator route: preflight from an allowed page refused", &allowed, "/v1/admin/thing", http.MethodOptions, "https://app.test", http.StatusForbidden, CodeCORSNotAllowed, false},
		{"operator route: preflight refused under *", &all, "/v1/admin/thing", http.MethodOptions, "https://app.test", http.StatusForbidden, CodeCORSNotAllowed, false},
		{"operator route: preflight refused with an empty list", &Origins{}, "/v1/admin/thing", http.MethodOptions, "https://app.test", http.StatusForbidden, CodeCORSNotAllowed, false},
		{"operator route: post from an allowed page, no CORS headers", &allowed, "/v1/admin/thing", http.MethodPost, "https://app.test", http.StatusOK, "", false},
		{"operator route: native client", &allowed, "/v1/admin/thing", http.MethodPost, "", http.StatusOK, "", false},
		{"a longer path is another route", &allowed, "/v1/rooms/demo/thing/x", http.MethodOptions, "https://app.test", http.StatusForbidden, CodeCORSNotAllowed, false},
		{"an empty parameter is no route", &allowed, "/v1/rooms//thing", http.MethodOptions, "https://app.test", http.StatusForbidden, CodeCORSNotAllowed, false},
		{"an escaped slash stays in its segment", &allowed, "/v1/rooms/a%2Fb/thing", http.MethodOptions, "https://app.test", http.StatusNoContent, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEngine(EngineConfig{Role: "test", CORS: tt.cors, CORSRoutes: []string{"/v1/rooms/:room/thing"}})
			ok := func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) }
			e.POST("/v1/rooms/:room/thing", ok)
			e.POST("/v1/admin/thing", ok)
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.method == http.MethodOptions {
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if tt.code != "" {
				var v struct {
					Error struct{ Code string } `json:"error"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.Error.Code != tt.code {
					t.Fatalf("body %s, want code %s", rec.Body, tt.code)
				}
			}
			got := rec.Header().Get("Access-Control-Allow-Origin")
			if tt.allowed != (got == tt.origin && got != "") {
				t.Fatalf("Access-Control-Allow-Origin = %q", got)
			}
			if tt.allowed && tt.method == http.MethodOptions {
				if h := rec.Header().Get("Access-Control-Allow-Headers"); h == "" || rec.Header().Get("Access-Control-Max-Age") == "" {
					t.Fatalf("preflight headers missing: %v", rec.Header())
				}
			}
		})
	}
}
