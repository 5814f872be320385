package wire

import (
	"encoding/json"
	"testing"
)

// TestEntryAppendJSON: the hand-built answer is byte for byte what
// encoding/json writes, odd strings, nil lists and the optional refresh
// hint and degraded flag included.
func TestEntryAppendJSON(t *testing.T) {
	for _, e := range []Entry{
		{},
		{Room: "r1", User: "u-1", Role: "viewer", Ingest: []string{"http://i1", "http://i2"}, Edge: []string{"ws://e1"},
			CDN: "https://cdn.example/", Token: "a.b.c", TokenExpiresMs: 1_900_000_000_000, ServerTimeMs: -5, SegmentMs: 1000, PublishDelayMs: 800},
		{User: "用户<&>\"\\\u2028\x01\xff", Ingest: []string{}, Edge: []string{"ws://e?a=1&b=2"}, CDN: "https://cdn/</script>"},
		{Room: "r1", RefreshMs: 480_000},
		{Room: "r1", RefreshMs: 561_234, Degraded: true},
		{Degraded: true},
		{RefreshMs: -1},
	} {
		checkEntryJSON(t, &e)
	}
}

// FuzzEntryAppendJSON: whatever the fields hold, AppendJSON writes what
// encoding/json writes.
func FuzzEntryAppendJSON(f *testing.F) {
	f.Add("r1", "u-1", "ws://e1", "a.b.c", int64(1_900_000_000_000), int64(480_000), false)
	f.Add("", "用户<&>\"\\\u2028\x01\xff", "", "", int64(-5), int64(0), true)
	f.Fuzz(func(t *testing.T, room, user, edge, token string, exp, refresh int64, degraded bool) {
		checkEntryJSON(t, &Entry{
			Room: room, User: user, Edge: []string{edge, user}, Token: token,
			TokenExpiresMs: exp, ServerTimeMs: -exp, RefreshMs: refresh, Degraded: degraded,
		})
	})
}

func checkEntryJSON(t *testing.T, e *Entry) {
	t.Helper()
	want, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.AppendJSON(nil); string(got) != string(want) {
		t.Errorf("AppendJSON =\n%s\nwant\n%s", got, want)
	}
}
