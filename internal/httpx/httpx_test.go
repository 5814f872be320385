package httpx

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

type body struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

func TestBindJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		status int
		code   string
	}{
		{"ok", `{"text":"hi","n":1}`, 200, ""},
		{"empty", ``, 400, CodeBadJSON},
		{"malformed", `{"text":`, 400, CodeBadJSON},
		{"syntax", `{"text" 1}`, 400, CodeBadJSON},
		{"wrong type", `{"n":"x"}`, 400, CodeBadJSON},
		{"unknown field", `{"nope":1}`, 400, CodeBadJSON},
		{"trailing value", `{"n":1}{"n":2}`, 400, CodeBadJSON},
		{"too large", `{"text":"` + strings.Repeat("x", 200) + `"}`, 413, CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEngine(EngineConfig{Role: "test"})
			e.POST("/x", func(c *gin.Context) {
				var b body
				if err := BindJSON(c, 100, &b); err != nil {
					Abort(c, err)
					return
				}
				c.JSON(200, b)
			})
			w := httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(tt.in)))
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if tt.code != "" {
				if got := errorCode(t, w.Body.Bytes()); got != tt.code {
					t.Fatalf("code %q, want %q", got, tt.code)
				}
			}
		})
	}
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not a coded error: %s (%v)", b, err)
	}
	return e.Error.Code
}

func TestEngineRoutes(t *testing.T) {
	healthy := error(nil)
	e := NewEngine(EngineConfig{Role: "r", Gatherer: prometheus.NewRegistry(), Healthy: func() error { return healthy }})
	e.GET("/panic", func(c *gin.Context) { panic("boom") })
	e.GET("/limited", func(c *gin.Context) {
		err := Errorf(http.StatusTooManyRequests, CodeRateLimited, "slow down")
		err.RetryAfter = 1500 * time.Millisecond
		Abort(c, err)
	})
	do := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	if w := do("GET", "/healthz"); w.Code != 200 {
		t.Fatalf("healthz %d", w.Code)
	}
	if w := do("HEAD", "/healthz"); w.Code != 200 {
		t.Fatalf("HEAD healthz %d", w.Code)
	}
	if w := do("GET", "/metrics"); w.Code != 200 {
		t.Fatalf("metrics %d", w.Code)
	}
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nope", 404, CodeNotFound},
		{"POST", "/healthz", 405, CodeNoMethod},
		{"GET", "/panic", 500, CodeInternal},
		{"GET", "/limited", 429, CodeRateLimited},
	} {
		w := do(c.method, c.path)
		if w.Code != c.status || errorCode(t, w.Body.Bytes()) != c.code {
			t.Fatalf("%s %s = %d %s", c.method, c.path, w.Code, w.Body)
		}
		if c.status == 429 && w.Header().Get("Retry-After") != "2" {
			t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
		}
	}
	healthy = errors.New("draining")
	if w := do("GET", "/healthz"); w.Code != 503 || errorCode(t, w.Body.Bytes()) != CodeUnavailable {
		t.Fatalf("unhealthy healthz = %d %s", w.Code, w.Body)
	}
}

func TestBearerToken(t *testing.T) {
	for _, c := range []struct{ header, query, want string }{
		{"Bearer abc", "", "abc"},
		{"bearer abc", "", "abc"},
		// The scheme is case-insensitive (RFC 9110 11.1); one or more
		// spaces follow it.
		{"BEARER abc", "", "abc"},
		{"bEaReR abc", "", "abc"},
		{"Bearer  abc", "", "abc"},
		{"Bearerabc", "", ""},
		{"Bearer ", "q", "q"},
		{"Bearer x", "", "x"},
		{"Basic abc", "", ""},
		{"", "q", "q"},
		{"Bearer h", "q", "h"},
	} {
		e := gin.New()
		var got string
		e.GET("/", func(c *gin.Context) { got = BearerToken(c, "token") })
		r := httptest.NewRequest("GET", "/?token="+c.query, nil)
		if c.query == "" {
			r = httptest.NewRequest("GET", "/", nil)
		}
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		e.ServeHTTP(httptest.NewRecorder(), r)
		if got != c.want {
			t.Fatalf("%+v: got %q", c, got)
		}
	}
}
