package httpx

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// strictBody exercises what BindJSON's scan knows about: nested structs,
// lists of structs, maps, pointers, times, embedded structs and opaque values.
type strictBody struct {
	Text   *string           `json:"text"`
	N      int               `json:"n"`
	Count  uint32            `json:"count"`
	Value  *int64            `json:"value"`
	Ratio  float64           `json:"ratio"`
	On     bool              `json:"on"`
	At     time.Time         `json:"at"`
	Rooms  []strictRoom      `json:"rooms"`
	Tags   map[string]string `json:"tags"`
	Raw    json.RawMessage   `json:"raw"`
	Any    any               `json:"any"`
	Hidden string            `json:"-"`
	strictEmbedded
}

type strictRoom struct {
	ID     string        `json:"id"`
	Limits *strictLimits `json:"limits"`
	Shares []float64     `json:"shares"`
}

type strictLimits struct {
	X uint16 `json:"x"`
}

type strictEmbedded struct {
	Promoted string `json:"promoted"`
}

// bind runs BindJSON over body into v the way a handler does.
func bind(t testing.TB, body string, limit int64, v any) (int, *Error) {
	t.Helper()
	e := NewEngine(EngineConfig{Role: "test"})
	var got *Error
	e.POST("/x", func(c *gin.Context) {
		if got = BindJSON(c, limit, v); got != nil {
			Abort(c, got)
			return
		}
		c.Status(http.StatusNoContent)
	})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(body)))
	return w.Code, got
}

// goTypeName matches what a message must not hold: Go type names.
var goTypeName = regexp.MustCompile(`\b(u?int(8|16|32|64)?|float(32|64)|uintptr|interface|struct|map\[|\[\]|Go value|Go struct|httpx\.|json\.|time\.Time|UnmarshalJSON)\b|\*[a-z]`)

// quoted matches the quoted parts of a message: field names and keys as the
// client sent them, which may hold anything.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// namesGoType returns the Go type name a message holds outside quotes, if any.
func namesGoType(msg string) string {
	return goTypeName.FindString(quoted.ReplaceAllString(msg, `""`))
}

func TestBindJSONStrict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		status  int
		code    string
		message string // a substring the message must hold
	}{
		// The controls.
		{"ok", `{"text":"hi","n":-1,"count":7,"value":0,"ratio":0.5,"on":true}`, 204, "", ""},
		{"ok nested", `{"rooms":[{"id":"a","limits":{"x":1},"shares":[0.1,1e2]},{"id":"b"}],"tags":{"k":"v","K":"w"}}`, 204, "", ""},
		{"ok time and null", `{"at":"2026-12-24T19:00:00Z","value":null,"text":null}`, 204, "", ""},
		{"ok embedded field", `{"promoted":"p"}`, 204, "", ""},
		{"ok surrogate pair", `{"text":"\ud83c\udf89"}`, 204, "", ""},
		{"ok opaque values keep JSON", `{"raw":{"A":1,"a":2},"any":[{"X":1}]}`, 204, "", ""},
		{"ok white space around", " \r\n\t{ \"n\" : 1 } \n", 204, "", ""},
		{"ok escaped key", `{"te\u0078t":"hi"}`, 204, "", ""},
		{"ok U+FFFD written as is", `{"text":"` + "\uFFFD" + `"}`, 204, "", ""},

		// Invalid UTF-8: refused before encoding/json turns it into U+FFFD.
		{"invalid byte", "{\"text\":\"a\xffb\"}", 400, CodeBadUTF8, "byte 10"},
		{"overlong encoding", "{\"text\":\"\xc0\xaf\"}", 400, CodeBadUTF8, "not valid UTF-8"},
		{"UTF-8 encoded surrogate", "{\"text\":\"\xed\xa0\x80\"}", 400, CodeBadUTF8, ""},
		{"truncated sequence", "{\"text\":\"\xe5\xad\"}", 400, CodeBadUTF8, ""},
		{"invalid byte in a key", "{\"te\xffxt\":1}", 400, CodeBadUTF8, ""},
		{"invalid byte outside strings", "{\"n\":1}\xff", 400, CodeBadUTF8, ""},
		{"lone high surrogate escape", `{"text":"\ud800"}`, 400, CodeBadUTF8, `field "text"`},
		{"lone low surrogate escape", `{"text":"a\udc00b"}`, 400, CodeBadUTF8, `\udc00`},
		{"high surrogate then a letter", `{"text":"\ud800\u0041"}`, 400, CodeBadUTF8, ""},
		{"two high surrogates", `{"text":"\ud800\ud800"}`, 400, CodeBadUTF8, ""},
		{"surrogate in a nested value", `{"rooms":[{"id":"\uDBFF"}]}`, 400, CodeBadUTF8, `field "rooms[0].id"`},
		{"surrogate in a key", `{"tags":{"\ud800":"v"}}`, 400, CodeBadUTF8, ""},

		// Keys: exact names, once each.
		{"duplicate key", `{"n":1,"n":2}`, 400, CodeBadJSON, `duplicate field "n"`},
		{"duplicate key, one escaped", `{"text":"a","te\u0078t":"b"}`, 400, CodeBadJSON, `duplicate field "text"`},
		{"duplicate nested key", `{"rooms":[{"id":"a"},{"id":"b","id":"c"}]}`, 400, CodeBadJSON, `duplicate field "rooms[1].id"`},
		{"duplicate map key", `{"tags":{"k":"v","k":"w"}}`, 400, CodeBadJSON, `duplicate field "tags.k"`},
		{"duplicate key inside an opaque value", `{"raw":{"a":1,"a":2}}`, 400, CodeBadJSON, `duplicate field "raw.a"`},
		{"duplicate key among many", `{"tags":{"a":"","b":"","c":"","d":"","e":"","f":"","g":"","h":"","i":"","j":"","a":""}}`, 400, CodeBadJSON, `duplicate field "tags.a"`},
		{"key in another case", `{"Text":"hi"}`, 400, CodeBadJSON, `did you mean "text"`},
		{"key in upper case", `{"TEXT":"hi"}`, 400, CodeBadJSON, `unknown field "TEXT"`},
		{"key with a Kelvin sign", `{"tags":{},"Rooms":[]}`, 400, CodeBadJSON, `did you mean "rooms"`},
		{"key folding through U+212A", "{\"\u212a\":1}", 400, CodeBadJSON, "unknown field"},
		{"nested key in another case", `{"rooms":[{"ID":"a"}]}`, 400, CodeBadJSON, `unknown field "rooms[0].ID"`},
		{"escaped key in another case", `{"\u0054ext":"hi"}`, 400, CodeBadJSON, `did you mean "text"`},
		{"unknown field", `{"nope":1}`, 400, CodeBadJSON, `unknown field "nope"`},
		{"unknown nested field", `{"rooms":[{},{"limits":{"y":1}}]}`, 400, CodeBadJSON, `unknown field "rooms[1].limits.y"`},
		{"json:\"-\" field is unknown", `{"Hidden":"x"}`, 400, CodeBadJSON, "unknown field"},
		{"Go field name is unknown", `{"Count":1}`, 400, CodeBadJSON, `did you mean "count"`},

		// Types, in JSON's words.
		{"string for a number", `{"n":"1"}`, 400, CodeBadJSON, `field "n" must be a whole number from -9223372036854775808 to 9223372036854775807 (got string)`},
		{"negative for unsigned", `{"count":-1}`, 400, CodeBadJSON, `field "count" must be a whole number from 0 to 4294967295 (got number -1)`},
		{"beyond uint32", `{"count":4294967296}`, 400, CodeBadJSON, `field "count"`},
		{"fraction for an integer", `{"value":1.5}`, 400, CodeBadJSON, `field "value" must be a whole number`},
		{"number for a string", `{"text":5}`, 400, CodeBadJSON, `field "text" must be a string (got number)`},
		{"object for a string", `{"text":{}}`, 400, CodeBadJSON, `field "text" must be a string (got object)`},
		{"string for a bool", `{"on":"yes"}`, 400, CodeBadJSON, `field "on" must be true or false`},
		{"huge number for a float", `{"ratio":1e999}`, 400, CodeBadJSON, `field "ratio" must be a number`},
		{"object for a list", `{"rooms":{}}`, 400, CodeBadJSON, `field "rooms" must be an array (got object)`},
		{"nested type with index", `{"rooms":[{},{"limits":{"x":70000}}]}`, 400, CodeBadJSON, `field "rooms[1].limits.x" must be a whole number from 0 to 65535`},
		{"list element type", `{"rooms":[{"shares":[1,"a"]}]}`, 400, CodeBadJSON, `field "rooms[0].shares[1]" must be a number (got string)`},
		{"map value type", `{"tags":{"k":1}}`, 400, CodeBadJSON, `field "tags.k" must be a string`},
		{"body an array", `["hi"]`, 400, CodeBadJSON, "body must be an object (got array)"},
		{"body a string", `"hi"`, 400, CodeBadJSON, "body must be an object (got string)"},
		{"bad time", `{"at":"tomorrow"}`, 400, CodeBadJSON, `field "at" must be a time string in RFC 3339 form`},
		{"time a number", `{"at":5}`, 400, CodeBadJSON, `field "at" must be a time string`},

		// Syntax, as before.
		{"empty", ``, 400, CodeBadJSON, "empty body"},
		{"only white space", " \n\t", 400, CodeBadJSON, "empty body"},
		{"truncated", `{"text":`, 400, CodeBadJSON, "truncated JSON"},
		{"truncated string", `{"text":"ab`, 400, CodeBadJSON, "truncated JSON"},
		{"truncated literal", `{"on":tr`, 400, CodeBadJSON, "truncated JSON"},
		{"missing colon", `{"text" 1}`, 400, CodeBadJSON, "malformed JSON at byte 8"},
		{"raw control character in a string", "{\"text\":\"a\tb\"}", 400, CodeBadJSON, "malformed JSON"},
		{"bad escape", `{"text":"\x41"}`, 400, CodeBadJSON, "malformed JSON"},
		{"short unicode escape", `{"text":"\u12"}`, 400, CodeBadJSON, "malformed JSON"},
		{"leading zero", `{"n":01}`, 400, CodeBadJSON, "malformed JSON"},
		{"bare minus", `{"n":-}`, 400, CodeBadJSON, "malformed JSON"},
		{"fraction without digits", `{"n":1.}`, 400, CodeBadJSON, "malformed JSON"},
		{"exponent without digits", `{"n":1e}`, 400, CodeBadJSON, "malformed JSON"},
		{"plus sign", `{"n":+1}`, 400, CodeBadJSON, "malformed JSON"},
		{"single quotes", `{'n':1}`, 400, CodeBadJSON, "malformed JSON"},
		{"trailing comma", `{"n":1,}`, 400, CodeBadJSON, "malformed JSON"},
		{"trailing value", `{"n":1}{"n":2}`, 400, CodeBadJSON, "data after the JSON value at byte 7"},
		{"trailing garbage", `{"n":1} x`, 400, CodeBadJSON, "data after the JSON value"},
		{"byte order mark", "\ufeff{\"n\":1}", 400, CodeBadJSON, "malformed JSON at byte 0"},
		{"nested too deep", `{"any":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, 400, CodeBadJSON, "deeper than 64"},
		{"too large", `{"text":"` + strings.Repeat("x", 300) + `"}`, 413, CodeTooLarge, "exceeds 256 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strictBody
			status, e := bind(t, tc.body, 256, &b)
			if status != tc.status {
				t.Fatalf("status %d, want %d (%v)", status, tc.status, e)
			}
			if tc.code == "" {
				return
			}
			if e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("got %s %q, want %s holding %q", e.Code, e.Message, tc.code, tc.message)
			}
			if m := namesGoType(e.Message); m != "" {
				t.Errorf("message %q names a Go type (%q)", e.Message, m)
			}
		})
	}
}

// The values decoded are encoding/json's: the scan only refuses.
func TestBindJSONDecodes(t *testing.T) {
	body := `{"text":"h\u00e9\ud83c\udf89","n":-3,"count":4,"value":9,"at":"2026-12-24T19:00:00Z",` +
		`"rooms":[{"id":"a","limits":{"x":2},"shares":[0.5]}],"tags":{"k":"v"},"raw":{"z":[1]},"any":{"q":true},"promoted":"p"}`
	var got, want strictBody
	if status, e := bind(t, body, 1<<10, &got); status != 204 {
		t.Fatalf("status %d: %v", status, e)
	}
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, encoding/json decodes %+v", got, want)
	}
	if *got.Text != "hé🎉" || got.Promoted != "p" {
		t.Fatalf("decoded %+v", got)
	}
}

// A pooled buffer is reused; nothing decoded may alias it.
func TestBindJSONNoAliasing(t *testing.T) {
	var first strictBody
	if status, e := bind(t, `{"text":"first","raw":{"a":1},"tags":{"k":"v1"}}`, 1<<10, &first); status != 204 {
		t.Fatal(e)
	}
	for range 10 {
		var b strictBody
		if status, e := bind(t, `{"text":"XXXXX","raw":{"b":2},"tags":{"k":"v2"}}`, 1<<10, &b); status != 204 {
			t.Fatal(e)
		}
	}
	if *first.Text != "first" || string(first.Raw) != `{"a":1}` || first.Tags["k"] != "v1" {
		t.Fatalf("first body changed under reuse: %+v", first)
	}
}

func TestBindJSONNotAPointer(t *testing.T) {
	status, e := bind(t, `{}`, 100, strictBody{})
	if status != 500 || e.Code != CodeInternal {
		t.Fatalf("status %d %v, want 500 internal", status, e)
	}
}

// Ambiguous embedded fields are no field at all, as for encoding/json.
func TestSchemaFollowsEncodingJSON(t *testing.T) {
	type A struct{ Name, OnlyA string }
	type B struct{ Name string }
	type C struct {
		Tagged string `json:"Name"`
	}
	type both struct {
		A
		B
	}
	type tagWins struct {
		A
		C
	}
	type shallowWins struct {
		A
		Name int `json:"Name"`
	}
	for _, tc := range []struct {
		v    any
		want []string
	}{
		{&both{}, []string{"OnlyA"}},
		{&tagWins{}, []string{"Name", "OnlyA"}},
		{&shallowWins{}, []string{"Name", "OnlyA"}},
		{&struct {
			X int `json:"x,omitempty"`
			Y int `json:",string"`
			//lint:ignore SA5008 a field named "-" (tag "-,") is the case under test
			Z int `json:"-,"`
			w int
		}{}, []string{"-", "Y", "x"}},
	} {
		sc := schemaOf(reflect.TypeOf(tc.v))
		var got []string
		for _, f := range sc.fields {
			got = append(got, f.name)
		}
		slicesSort(got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%T: fields %v, want %v", tc.v, got, tc.want)
		}
	}
	var tw tagWins
	if status, e := bind(t, `{"Name":"x"}`, 100, &tw); status != 204 || tw.Tagged != "x" || tw.A.Name != "" {
		t.Fatalf("tagged field does not win: %d %v %+v", status, e, tw)
	}
	// A recursive type builds.
	type node struct {
		Kids []node `json:"kids"`
	}
	if status, e := bind(t, `{"kids":[{"kids":[{"Kids":[]}]}]}`, 1<<10, &node{}); status != 400 || !strings.Contains(e.Message, `"kids[0].kids[0].Kids"`) {
		t.Fatalf("recursive type: %d %v", status, e)
	}
}

func slicesSort(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// FuzzBindJSON: any body gets a success or a coded 4xx, never a panic; a
// success is a body encoding/json also takes (with the same result), that
// is valid UTF-8 and has no duplicate keys; and the scan's syntax verdict
// is encoding/json's.
func FuzzBindJSON(f *testing.F) {
	for _, s := range []string{
		`{"text":"hi","n":1}`, `{"rooms":[{"id":"a","limits":{"x":1}}]}`, `{"n":1,"n":2}`, `{"Text":"x"}`,
		`{"text":"\ud800"}`, "{\"text\":\"\xff\"}", `{"tags":{"a":"b"}}`, `[1,2]`, `{"at":"2026-01-01T00:00:00Z"}`,
		`{"any":[[[[]]]],"raw":{"a":{"b":null}}}`, `{"n":-0.5e+3}`, `  `, `{"te\u0078t":"\u00e9"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var b strictBody
		status, e := bind(t, string(body), 1<<12, &b)
		if status != 204 {
			if status < 400 || status >= 500 || e == nil || e.Code == "" || e.Message == "" {
				t.Fatalf("%q: status %d %v", body, status, e)
			}
			if m := namesGoType(e.Message); m != "" {
				t.Fatalf("%q: message %q names a Go type (%q)", body, e.Message, m)
			}
		} else {
			if !utf8.Valid(body) || !json.Valid(body) {
				t.Fatalf("accepted %q, which is not valid UTF-8 JSON", body)
			}
			var want strictBody
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&want); err != nil {
				t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
			}
			if !reflect.DeepEqual(b, want) {
				t.Fatalf("%q: decoded %+v, encoding/json %+v", body, b, want)
			}
		}
		if !utf8.Valid(body) {
			return
		}
		switch fault := checkJSON(body, nil); {
		case fault == nil:
			if !json.Valid(body) {
				t.Fatalf("scan accepts %q, encoding/json does not", body)
			}
		case fault.kind == faultSyntax || fault.kind == faultTruncated || fault.kind == faultTrailing:
			if json.Valid(body) {
				t.Fatalf("scan refuses %q as malformed (%v), encoding/json takes it", body, fault.httpError())
			}
		}
	})
}

// TestCheckJSON: JSON read outside a body (claims, frames) gets BindJSON's
// rules — exact names, no duplicates, UTF-8, one value — with unknown
// members refused in a closed format and passed over in an open one.
func TestCheckJSON(t *testing.T) {
	type frame struct {
		Token string `json:"token"`
		Last  string `json:"last"`
	}
	for _, tc := range []struct {
		data           string
		closed         bool
		member, reason string // "" and "": accepted
	}{
		{`{"token":"t","last":"1-0"}`, true, "", ""},
		{` {"t\u006fken":"t"} `, true, "", ""},
		{`{"token":"t","other":[1,{"x":2}]}`, false, "", ""},
		{`{"token":"t","other":1}`, true, "other", "unknown"},
		{`{"TOKEN":"t"}`, false, "TOKEN", `names are case-sensitive; did you mean "token"?`},
		{`{"Token":"t"}`, true, "Token", `names are case-sensitive; did you mean "token"?`},
		{`{"la\u017Ft":"1-0"}`, false, "laſt", `names are case-sensitive; did you mean "last"?`},
		{`{"token":"a","token":"b"}`, false, "token", "repeated"},
		{`{"token":"a","x":1,"x":2}`, false, "x", "repeated"},
		{`{"token":"a"} {}`, false, "", "data after the JSON value at byte 14: a body holds one JSON value"},
		{`{"token":"a`, false, "", "truncated JSON"},
		{"{\"token\":\"\xff\"}", false, "", "not valid UTF-8"},
		{`{"token":"\ud800"}`, false, "", `field "token" holds the escape \ud800 at byte 10, half of a surrogate pair without its other half: not a character`},
	} {
		err := CheckJSON([]byte(tc.data), &frame{}, tc.closed)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s (closed %v): %v", tc.data, tc.closed, err)
			}
			continue
		}
		je, ok := err.(*JSONError)
		if !ok || je.Member != tc.member || je.Reason != tc.reason {
			t.Errorf("%s (closed %v): %#v, want member %q reason %q", tc.data, tc.closed, err, tc.member, tc.reason)
		}
	}
	data := []byte(`{"token":"t","last":"1-0","x":1}`)
	if n := testing.AllocsPerRun(100, func() { _ = CheckJSON(data, (*frame)(nil), false) }); n != 0 {
		t.Errorf("CheckJSON of valid data allocates %v times", n)
	}
}
