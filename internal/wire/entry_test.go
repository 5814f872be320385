package wire

import (
	"encoding/json"
	"testing"
)

// TestEntryAppendJSON: the hand-built answer is byte for byte what
// encoding/json writes, odd strings and nil lists included.
func TestEntryAppendJSON(t *testing.T) {
	for _, e := range []Entry{
		{},
		{Room: "r1", User: "u-1", Role: "viewer", Ingest: []string{"http://i1", "http://i2"}, Edge: []string{"ws://e1"},
			CDN: "https://cdn.example/", Token: "a.b.c", TokenExpiresMs: 1_900_000_000_000, ServerTimeMs: -5, SegmentMs: 1000, PublishDelayMs: 800},
		{User: "用户<&>\"\\\u2028\x01\xff", Ingest: []string{}, Edge: []string{"ws://e?a=1&b=2"}, CDN: "https://cdn/</script>"},
	} {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("AppendJSON =\n%s\nwant\n%s", got, want)
		}
	}
}
