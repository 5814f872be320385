package ratelimit_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"danmaku/internal/ratelimit"
)

// FuzzParse: the rules decoder never panics, refuses only with a coded
// ConfigError, and what it accepts survives a round trip unchanged (what
// a node logs or stores is what it enforces).
func FuzzParse(f *testing.F) {
	def, _ := json.Marshal(ratelimit.DefaultRules(ratelimit.Machine{Dev: true}))
	for _, s := range []string{
		string(def), `{}`, `{"rules":[]}`, `{"allow":{"cidrs":["::/0"]}}`,
		`{"rules":[{"name":"a","route":"/v1/*","key":"user","algorithm":"window","limit":3,"per":"1h","near":1}]}`,
		`{"rules":[{"name":"a","route":"*","key":"ip","algorithm":"local","limit":1,"per":"1s","burst":1e9}]}`,
		`{"rules":[{"name":"a","name":"b"}]}`, `{"rules":null}`, `[]`, `{"rules":[{"per":"-1s"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ratelimit.Parse(data)
		if err != nil {
			var ce *ratelimit.ConfigError
			if !errors.As(err, &ce) || ce.Code == "" || ce.Message == "" {
				t.Fatalf("Parse(%q) = %v: not a coded ConfigError", data, err)
			}
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ratelimit.Parse(again)
		if err != nil {
			t.Fatalf("re-encoded rules %s refused: %v", again, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the rules:\n%+v\n%+v", r, r2)
		}
	})
}
