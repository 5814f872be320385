package ingest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"danmaku/internal/httpx"
	"danmaku/internal/ident"
	"danmaku/sdk/wire"
)

// bindGift runs a body through what the gift handler does before it stores
// anything: httpx.BindJSON, then check.
func bindGift(t testing.TB, body string) (GiftRequest, *httpx.Error) {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodPost, "/v1/gifts", strings.NewReader(body))
	var g GiftRequest
	if e := httpx.BindJSON(c, defaultMaxBody, &g); e != nil {
		return g, e
	}
	return g, g.check()
}

// giftJSON is a valid gift body with fields replaced; a nil value deletes
// the field.
func giftJSON(mod map[string]any) string {
	g := map[string]any{
		"order_id": "order-1", "room": "demo", "user": "u1", "nick": "nick", "avatar": "a1",
		"gift": "rocket", "value": 500, "count": 2,
	}
	for k, v := range mod {
		if v == nil {
			delete(g, k)
			continue
		}
		g[k] = v
	}
	b, _ := json.Marshal(g)
	return string(b)
}

// Every field's bad input gets a coded 400 naming the field.
func TestGiftRequestCheck(t *testing.T) {
	long := strings.Repeat
	for _, tc := range []struct {
		name  string
		body  string
		code  string // "" = accepted
		field string // the field the message must name
	}{
		{"valid", giftJSON(nil), "", ""},
		{"longest fields", giftJSON(map[string]any{"order_id": long("o", 64), "room": long("r", 64), "user": long("u", 64),
			"gift": long("g", 32), "nick": long("n", 128), "avatar": "https://img.example/" + long("a", 236)}), "", ""},
		{"CJK user and nick", giftJSON(map[string]any{"user": "用户42", "nick": "小明"}), "", ""},
		{"nick and avatar omitted", giftJSON(map[string]any{"nick": nil, "avatar": nil}), "", ""},
		{"free gift, count omitted", giftJSON(map[string]any{"value": 0, "count": nil}), "", ""},

		{"order_id missing", giftJSON(map[string]any{"order_id": nil}), "bad_field", "order_id"},
		{"order_id too long", giftJSON(map[string]any{"order_id": long("o", 65)}), "bad_field", "order_id"},
		{"order_id with a space", giftJSON(map[string]any{"order_id": "o-1 "}), "bad_field", "order_id"},
		{"order_id with a newline", giftJSON(map[string]any{"order_id": "o-1\n"}), "bad_field", "order_id"},
		{"order_id non-ASCII", giftJSON(map[string]any{"order_id": "订单"}), "bad_field", "order_id"},
		{"room missing", giftJSON(map[string]any{"room": nil}), "bad_field", "room"},
		{"room invalid", giftJSON(map[string]any{"room": "a/b"}), "bad_field", "room"},
		{"user missing", giftJSON(map[string]any{"user": nil}), "bad_field", "user"},
		{"user too long", giftJSON(map[string]any{"user": long("u", 65)}), "bad_field", "user"},
		{"user with NUL", giftJSON(map[string]any{"user": "u\x001"}), "bad_field", "user"},
		{"user with newline", giftJSON(map[string]any{"user": "u1\n"}), "bad_field", "user"},
		{"user with bidi override", giftJSON(map[string]any{"user": "u1\u202e"}), "bad_field", "user"},
		{"user with zero-width space", giftJSON(map[string]any{"user": "u\u200b1"}), "bad_field", "user"},
		{"user with U+FFFD", giftJSON(map[string]any{"user": "u\ufffd"}), "bad_field", "user"},
		{"user not NFC", giftJSON(map[string]any{"user": "e\u0301"}), "bad_field", "user"},
		{"gift missing", giftJSON(map[string]any{"gift": nil}), "bad_field", "gift"},
		{"gift too long", giftJSON(map[string]any{"gift": long("g", 33)}), "bad_field", "gift"},
		{"gift with a space", giftJSON(map[string]any{"gift": "big rocket"}), "bad_field", "gift"},
		{"value missing", giftJSON(map[string]any{"value": nil}), "bad_field", "value"},
		{"value null", `{"order_id":"o","room":"demo","user":"u1","gift":"g","value":null}`, "bad_field", "value"},
		{"value negative", giftJSON(map[string]any{"value": -1}), "bad_field", "value"},
		{"count too large", giftJSON(map[string]any{"count": 100001}), "bad_field", "count"},
		{"nick too long", giftJSON(map[string]any{"nick": long("n", 129)}), "bad_field", "nick"},
		{"avatar a 2,500-byte URL", giftJSON(map[string]any{"avatar": "https://img.example/" + long("a", 2480)}), "bad_field", "avatar"},
		{"avatar code too long", giftJSON(map[string]any{"avatar": long("a", 33)}), "bad_field", "avatar"},
		{"avatar javascript", giftJSON(map[string]any{"avatar": "javascript:alert(1)"}), "bad_field", "avatar"},
		{"avatar with a quote", giftJSON(map[string]any{"avatar": `https://img.example/a"b`}), "bad_field", "avatar"},
		{"empty object", `{}`, "bad_field", "order_id"},
		{"null body", `null`, "bad_field", "order_id"},

		// What BindJSON refuses before check runs.
		{"invalid UTF-8 in the nick", "{\"order_id\":\"o\",\"room\":\"demo\",\"user\":\"u1\",\"gift\":\"g\",\"value\":1,\"nick\":\"a\xffb\"}", httpx.CodeBadUTF8, ""},
		{"lone surrogate in the user", `{"order_id":"o","room":"demo","user":"\ud800","gift":"g","value":1}`, httpx.CodeBadUTF8, "user"},
		{"duplicate user", `{"order_id":"o","room":"demo","user":"u1","user":"u2","gift":"g","value":1}`, httpx.CodeBadJSON, "user"},
		{"user in another case", `{"order_id":"o","room":"demo","User":"u1","gift":"g","value":1}`, httpx.CodeBadJSON, "User"},
		{"unknown field", giftJSON(map[string]any{"price": 1}), httpx.CodeBadJSON, "price"},
		{"value a string", giftJSON(map[string]any{"value": "5"}), httpx.CodeBadJSON, "value"},
		{"count negative", giftJSON(map[string]any{"count": -1}), httpx.CodeBadJSON, "count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := bindGift(t, tc.body)
			if tc.code == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil || e.Code != tc.code || e.Status != http.StatusBadRequest {
				t.Fatalf("got %+v, want 400 %s", e, tc.code)
			}
			if tc.field != "" && !strings.Contains(e.Message, `"`+tc.field) {
				t.Fatalf("message %q does not name %q", e.Message, tc.field)
			}
		})
	}
}

// The nickname is cleaned in place: no control, bidi or zero-width
// characters, at most wire.MaxNickRunes characters.
func TestGiftRequestCheckCleansNick(t *testing.T) {
	g, e := bindGift(t, giftJSON(map[string]any{"nick": "ad\u200bmin\u202e\nwxyz"}))
	if e != nil {
		t.Fatal(e)
	}
	if g.Nick != "admin" {
		t.Fatalf("nick %q, want %q", g.Nick, "admin")
	}
}

// FuzzGiftRequestCheck: any gift body is accepted or refused with a coded 4xx, never
// a panic; what is accepted holds only fields that pass the identity rules.
func FuzzGiftRequestCheck(f *testing.F) {
	for _, s := range []string{
		giftJSON(nil), `{}`, `null`, `{"user":"u1","user":"u2"}`, `{"User":"u1"}`,
		giftJSON(map[string]any{"nick": "ad\u200bmin\u202e"}), giftJSON(map[string]any{"user": "u\x00"}),
		"{\"nick\":\"\xff\"}", `{"value":-1}`, `{"avatar":"https://img.example/a.png"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		g, e := bindGift(t, body)
		if e != nil {
			if e.Status < 400 || e.Status >= 500 || e.Code == "" || e.Message == "" {
				t.Fatalf("%q: %+v", body, e)
			}
			return
		}
		if ident.CheckUser(g.User) != nil || ident.CheckOrder(g.OrderID) != nil || ident.CheckGift(g.Gift) != nil ||
			ident.CheckAvatar(g.Avatar) != nil || !wire.ValidRoom(g.Room) || g.Value == nil || *g.Value < 0 {
			t.Fatalf("%q accepted as %+v", body, g)
		}
		if utf8.RuneCountInString(g.Nick) > wire.MaxNickRunes || strings.ContainsFunc(g.Nick, func(r rune) bool {
			return unicode.IsControl(r) || ident.Invisible(r) || unicode.Is(unicode.Cf, r)
		}) {
			t.Fatalf("%q: nick %q kept", body, g.Nick)
		}
	})
}
