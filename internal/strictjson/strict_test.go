package strictjson

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"
)

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
		slices.Sort(got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%T: fields %v, want %v", tc.v, got, tc.want)
		}
	}
}

// FuzzScanSyntax: the scan's syntax verdict is encoding/json's.
func FuzzScanSyntax(f *testing.F) {
	// Texts at the edges of the grammar: truncated, trailing, escapes,
	// numbers, literals, nesting.
	for _, s := range []string{
		`{"a":1}`, `[1,2]`, `  `, `{"a":`, `{"a":1}}`, `{"a":1,}`, `-0.5e+3`, `01`, `1.`, `tru`, `nul`,
		`"\ud800"`, `"\u00e9\n"`, `"\x"`, `{"a":[[[[]]]],"b":{"c":null}}`, `{"a" 1}`, "\"a\x01\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
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
				t.Fatalf("scan refuses %q as malformed (%v), encoding/json takes it", body, fault.decodeError())
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
