package ingest_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"danmaku/auth"
	"danmaku/ingest"
	"danmaku/internal/ident"
)

// checkOperatorAnswer: never a 5xx, always JSON, and every refusal coded.
func checkOperatorAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("status %d with a non-JSON body %q", rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var b struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.Error.Code == "" || b.Error.Message == "" {
			t.Fatalf("status %d without a code and message: %s", rec.Code, rec.Body)
		}
	}
}

// FuzzBanBody: the ban API answers any body with a coded 4xx or a ban.
func FuzzBanBody(f *testing.F) {
	e, _, _, _ := banAPI(f)
	for _, s := range []string{
		``, `{}`, `{"room":"r1","ttl_seconds":600,"reason":"flood"}`, `{"until":"2030-01-01T00:00:00Z"}`,
		`{"room":"bad room"}`, `{"ttl_seconds":-1}`, `{"ttl_seconds":1e300}`, `{"until":"yesterday"}`,
		`{"reason":"` + strings.Repeat("x", 5000) + `"}`, `{"room":"r1","room":"r2"}`, `{"Room":"r1"}`,
		"{\"reason\":\"\xff\"}", `null`, `[]`, `{"reason":"a\u202eb"}`, `{"ttl_seconds":10000000000}`,
		`{"reason":"\u001b[31mred"}`,
	} {
		f.Add([]byte(s), "alice")
	}
	for _, user := range []string{"a\x00b", "alice\u202e", "\xff", "a+b", "a b", "用户"} {
		f.Add([]byte(`{}`), user)
	}
	f.Fuzz(func(t *testing.T, body []byte, user string) {
		if user == "" {
			user = "alice"
		}
		path := "/v1/admin/bans/" + url.PathEscape(user)
		req := httptest.NewRequest("PUT", path, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer op-key")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		checkOperatorAnswer(t, rec)
		if rec.Code != 200 {
			return
		}
		// What is stored is the id as sent, by the user id rules, with a
		// clean reason, and lapses in the future if at all.
		var b ingest.Ban
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		if b.User != user || ident.CheckUser(b.User) != nil || b.Reason != ident.CleanText(b.Reason) || (!b.Until.IsZero() && !b.Until.After(b.At)) {
			t.Fatalf("stored %+v for user %q", b, user)
		}
	})
}

// FuzzLotteryBody: the lottery API answers any start body with a coded
// 4xx or the lottery.
func FuzzLotteryBody(f *testing.F) {
	fx := newLotteryAPIFixture(f)
	host := fx.token(f, "r1", "host-1", auth.RoleHost)
	for _, s := range []string{
		`{"id":"l1","keyword":"抽奖","duration_seconds":60}`, ``, `{}`, `{"id":"l 1","keyword":"x","duration_seconds":60}`,
		`{"id":"l2","keyword":"","duration_seconds":60}`, `{"id":"l3","keyword":"x","duration_seconds":-5}`,
		`{"id":"l4","keyword":"` + strings.Repeat("字", 100) + `","duration_seconds":60}`, `{"id":"l5","keyword":"\u200b","duration_seconds":60}`,
		"{\"id\":\"l6\",\"keyword\":\"\xff\",\"duration_seconds\":60}", `{"ID":"l7"}`, `null`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, asHost bool) {
		key := lotteryOpKey
		if asHost {
			key = host
		}
		rec := fx.do("POST", "/v1/admin/rooms/r1/lotteries", key, string(body))
		checkOperatorAnswer(t, rec)
	})
}
