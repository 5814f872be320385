package wire_test

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"danmaku/sdk/wire"
)

const orderSecret = "ORDER-must-not-leak-7f3a"

// sampleMessages holds one message of every shape a segment carries.
func sampleMessages() []wire.Message {
	return []wire.Message{
		// A barrage with every viewer field set.
		{ID: "1700000000123-0", Kind: wire.KindBarrage, Offset: 123, User: "u1001", Nick: "小明同学", Avatar: "a7", Text: "前方高能！！！"},
		// A barrage at offset 0 from a viewer without avatar: o and a omitted.
		{ID: "1700000000000-1", Kind: wire.KindBarrage, User: "u1002", Nick: "路人", Text: "第一"},
		// A merged gift: count, value and the ids it stands for; its order id
		// must never reach the wire.
		{ID: "1700000000456-2", Kind: wire.KindGift, Offset: 456, User: "u2001", Nick: "土豪", Avatar: "b3",
			Gift: "rocket", Value: 50000, Count: 3,
			Merged: []string{"1700000000456-2", "1700000000600-0", "1700000000700-5"}, Order: orderSecret},
		// A single gift: count 0 (means 1) is omitted, no merged ids.
		{ID: "1700000000800-0", Kind: wire.KindGift, Offset: 800, User: "u2002", Gift: "heart", Value: 100, Order: orderSecret + "-2"},
		// A system message from the host: no user fields.
		{ID: "1700000000999-3", Kind: wire.KindSystem, Offset: 999, Text: "抽奖开始，发送口令参与", Role: "host"},
	}
}

func sampleSegment() *wire.Segment {
	return &wire.Segment{V: wire.Version, Room: "room_42", Second: 1700000000, Seq: 17, Dur: wire.SegmentDuration, Messages: sampleMessages()}
}

// asInt normalises any integer a generic msgpack decoder may produce (compact
// ints come back as int8, uint8, int16 ... depending on the value).
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > 1<<63-1 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestSegmentGenericDecode is the acceptance test of the segment format: the
// bytes decode with a generic msgpack decoder, knowing nothing of this
// package's types, into exactly the documented schema.
func TestSegmentGenericDecode(t *testing.T) {
	seg := sampleSegment()
	b, err := wire.EncodeSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(orderSecret)) {
		t.Fatal("the gift's order id reached the segment bytes")
	}

	var top map[string]any
	if err := msgpack.Unmarshal(b, &top); err != nil {
		t.Fatalf("generic decode: %v", err)
	}
	if got, want := sortedKeys(top), []string{"dur", "m", "room", "seq", "t", "v"}; !slices.Equal(got, want) {
		t.Fatalf("top-level keys = %v, want %v", got, want)
	}
	wantInts := map[string]int64{"v": wire.Version, "t": seg.Second, "seq": int64(seg.Seq), "dur": wire.SegmentDuration}
	for k, want := range wantInts {
		got, ok := asInt(top[k])
		if !ok || got != want {
			t.Errorf("%s = %v (%T), want integer %d", k, top[k], top[k], want)
		}
	}
	if room, ok := top["room"].(string); !ok || room != seg.Room {
		t.Errorf("room = %v (%T), want string %q", top["room"], top["room"], seg.Room)
	}
	list, ok := top["m"].([]any)
	if !ok {
		t.Fatalf("m = %T, want an array", top["m"])
	}
	msgs := sampleMessages()
	if len(list) != len(msgs) {
		t.Fatalf("m has %d entries, want %d", len(list), len(msgs))
	}

	// The exact key set of each message: empty fields are absent, "order"
	// (or any spelling of it) never appears.
	wantKeys := [][]string{
		{"a", "id", "k", "n", "o", "u", "x"},
		{"id", "k", "n", "u", "x"},
		{"a", "c", "g", "id", "ids", "k", "n", "o", "u", "v"},
		{"g", "id", "k", "o", "u", "v"},
		{"id", "k", "o", "r", "x"},
	}
	documented := map[string]bool{"id": true, "k": true, "o": true, "u": true, "n": true, "a": true, "x": true,
		"g": true, "v": true, "c": true, "ids": true, "r": true}
	for i, raw := range list {
		m, ok := raw.(map[string]any)
		if !ok {
			t.Fatalf("m[%d] = %T, want a map", i, raw)
		}
		keys := sortedKeys(m)
		if !slices.Equal(keys, wantKeys[i]) {
			t.Errorf("m[%d] keys = %v, want %v", i, keys, wantKeys[i])
		}
		for _, k := range keys {
			if !documented[k] {
				t.Errorf("m[%d] has undocumented key %q", i, k)
			}
			if strings.Contains(strings.ToLower(k), "order") {
				t.Errorf("m[%d] carries the order field as %q", i, k)
			}
		}
		checkGenericMessage(t, i, m, msgs[i])
	}
}

// An empty second is written too, and its "m" is an empty array, never
// absent or nil (docs/segment-format.md).
func TestSegmentGenericDecodeEmpty(t *testing.T) {
	b, err := wire.EncodeSegment(&wire.Segment{V: wire.Version, Room: "r", Second: 1700000001, Seq: 1, Dur: wire.SegmentDuration})
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := msgpack.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(top), []string{"dur", "m", "room", "seq", "t", "v"}; !slices.Equal(got, want) {
		t.Fatalf("top-level keys = %v, want %v", got, want)
	}
	if m, ok := top["m"].([]any); !ok || len(m) != 0 {
		t.Fatalf("m = %#v, want an empty array", top["m"])
	}
}

// checkGenericMessage checks each present value's type and value against the
// message it was encoded from.
func checkGenericMessage(t *testing.T, i int, got map[string]any, want wire.Message) {
	t.Helper()
	str := func(key, want string) {
		if v, ok := got[key]; ok {
			if s, ok := v.(string); !ok || s != want {
				t.Errorf("m[%d].%s = %v (%T), want string %q", i, key, v, v, want)
			}
		}
	}
	num := func(key string, want int64) {
		if v, ok := got[key]; ok {
			if n, ok := asInt(v); !ok || n != want {
				t.Errorf("m[%d].%s = %v (%T), want integer %d", i, key, v, v, want)
			}
		}
	}
	str("id", want.ID)
	num("k", int64(want.Kind))
	num("o", int64(want.Offset))
	str("u", want.User)
	str("n", want.Nick)
	str("a", want.Avatar)
	str("x", want.Text)
	str("g", want.Gift)
	num("v", want.Value)
	num("c", int64(want.Count))
	str("r", want.Role)
	if v, ok := got["ids"]; ok {
		list, ok := v.([]any)
		if !ok || len(list) != len(want.Merged) {
			t.Fatalf("m[%d].ids = %v (%T), want %d strings", i, v, v, len(want.Merged))
		}
		for j, id := range list {
			if s, ok := id.(string); !ok || s != want.Merged[j] {
				t.Errorf("m[%d].ids[%d] = %v (%T), want %q", i, j, id, id, want.Merged[j])
			}
		}
	}
}

func TestSegmentRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		seg  *wire.Segment
	}{
		{"messages", sampleSegment()},
		{"empty second", &wire.Segment{V: wire.Version, Room: "r", Second: 1700000001, Seq: 18, Dur: wire.SegmentDuration}},
		{"zero second", &wire.Segment{V: wire.Version, Room: "r", Dur: wire.SegmentDuration, Messages: []wire.Message{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := wire.EncodeSegment(tt.seg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wire.DecodeSegment(b)
			if err != nil {
				t.Fatalf("DecodeSegment: %v", err)
			}
			want := *tt.seg
			want.Messages = stripOrder(want.Messages)
			if !segmentsEqual(got, &want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, &want)
			}
		})
	}
}

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		frame *wire.Frame
	}{
		{"messages", &wire.Frame{V: wire.Version, Room: "room_42", Messages: sampleMessages()}},
		{"no messages", &wire.Frame{V: wire.Version, Room: "r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := wire.EncodeFrame(tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(orderSecret)) {
				t.Fatal("order id reached the frame bytes")
			}
			got, err := wire.DecodeFrame(b)
			if err != nil {
				t.Fatalf("DecodeFrame: %v", err)
			}
			if got.V != tt.frame.V || got.Room != tt.frame.Room || !messageListsEqual(got.Messages, stripOrder(tt.frame.Messages)) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tt.frame)
			}
		})
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := &wire.Manifest{V: wire.Version, Room: "room_42", Second: 1700000000, Seq: 17, Dur: wire.SegmentDuration}
	b, err := wire.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if *got != *m {
		t.Fatalf("round trip: got %+v, want %+v", got, m)
	}
	// The manifest is read by clients without this package: its keys are the
	// documented short names.
	if want := `{"v":1,"room":"room_42","t":1700000000,"seq":17,"dur":1000}`; string(b) != want {
		t.Fatalf("manifest JSON = %s, want %s", b, want)
	}
}

// mustEncodeSegment encodes s without any validation, as a buggy or hostile
// writer would.
func mustEncodeSegment(t testing.TB, s *wire.Segment) []byte {
	t.Helper()
	b, err := wire.EncodeSegment(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncodeFrame(t testing.TB, f *wire.Frame) []byte {
	t.Helper()
	b, err := wire.EncodeFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func segWith(edit func(s *wire.Segment)) *wire.Segment {
	s := sampleSegment()
	edit(s)
	return s
}

func frameWith(edit func(f *wire.Frame)) *wire.Frame {
	f := &wire.Frame{V: wire.Version, Room: "room_42", Messages: sampleMessages()}
	edit(f)
	return f
}

// lengthBomb is a map {"m": array32 of 2^28 entries} with no entries behind
// the header: a decoder that trusts the claimed length allocates gigabytes.
var lengthBomb = []byte{0x81, 0xa1, 'm', 0xdd, 0x10, 0x00, 0x00, 0x00}

func TestDecodeSegmentRejects(t *testing.T) {
	valid := mustEncodeSegment(t, sampleSegment())
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty input", nil, wire.ErrDecode},
		{"truncated", valid[:len(valid)-1], wire.ErrDecode},
		{"not msgpack", []byte("{\"v\":1}"), wire.ErrDecode},
		{"array length beyond input", lengthBomb, wire.ErrDecode},
		{"version 0", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.V = 0 })), wire.ErrVersion},
		{"version too new", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.V = wire.VersionSubSecond + 1 })), wire.ErrVersion},
		{"empty room", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Room = "" })), wire.ErrInvalid},
		{"room with slash", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Room = "a/../b" })), wire.ErrInvalid},
		{"negative second", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Second = -1 })), wire.ErrInvalid},
		{"bad message id", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[2].ID = "12" })), wire.ErrInvalid},
		{"empty message id", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[0].ID = "" })), wire.ErrInvalid},
		{"kind 0", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[1].Kind = 0 })), wire.ErrInvalid},
		{"unknown kind", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[1].Kind = wire.KindSystem + 1 })), wire.ErrInvalid},
		{"offset 1000", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[4].Offset = wire.SegmentDuration })), wire.ErrInvalid},
		{"offset max", mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[4].Offset = 65535 })), wire.ErrInvalid},
		{"too large", append(bytes.Clone(valid), make([]byte, wire.MaxSegmentBytes)...), wire.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wire.DecodeSegment(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeSegment err = %v, want %v", err, tt.want)
			}
			if !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			if got != nil {
				t.Fatalf("DecodeSegment returned %+v with an error", got)
			}
		})
	}

	t.Run("every truncation", func(t *testing.T) {
		for i := range len(valid) {
			if _, err := wire.DecodeSegment(valid[:i]); !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("DecodeSegment(first %d of %d bytes) err = %v, want ErrDecode", i, len(valid), err)
			}
		}
	})
	t.Run("offset 999 accepted", func(t *testing.T) {
		b := mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[4].Offset = wire.SegmentDuration - 1 }))
		if _, err := wire.DecodeSegment(b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown fields ignored", func(t *testing.T) {
		// A later version may add fields; this one must skip them.
		type future struct {
			wire.Segment `msgpack:",inline"`
			Extra        map[string]any `msgpack:"zz"`
		}
		b, err := msgpack.Marshal(&future{Segment: *sampleSegment(), Extra: map[string]any{"nested": []any{1, "x", nil}}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.DecodeSegment(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) != len(sampleMessages()) {
			t.Fatalf("got %d messages", len(got.Messages))
		}
	})
}

func TestDecodeFrameRejects(t *testing.T) {
	valid := mustEncodeFrame(t, frameWith(func(*wire.Frame) {}))
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty input", nil, wire.ErrDecode},
		{"truncated", valid[:len(valid)/2], wire.ErrDecode},
		{"array length beyond input", lengthBomb, wire.ErrDecode},
		{"version 0", mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.V = 0 })), wire.ErrVersion},
		{"version too new", mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.V = wire.Version + 1 })), wire.ErrVersion},
		{"invalid room", mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.Room = "no spaces" })), wire.ErrInvalid},
		{"bad message id", mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.Messages[0].ID = "x-1" })), wire.ErrInvalid},
		{"unknown kind", mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.Messages[0].Kind = 9 })), wire.ErrInvalid},
		{"offset 1000", mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.Messages[0].Offset = 1000 })), wire.ErrInvalid},
		{"too large", make([]byte, wire.MaxFrameBytes+1), wire.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wire.DecodeFrame(tt.in)
			if !errors.Is(err, tt.want) || !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("DecodeFrame err = %v, want %v", err, tt.want)
			}
			if got != nil {
				t.Fatalf("DecodeFrame returned %+v with an error", got)
			}
		})
	}
	t.Run("every truncation", func(t *testing.T) {
		for i := range len(valid) {
			if _, err := wire.DecodeFrame(valid[:i]); !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("DecodeFrame(first %d of %d bytes) err = %v, want ErrDecode", i, len(valid), err)
			}
		}
	})
}

func TestDecodeManifestRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", ``, wire.ErrDecode},
		{"truncated", `{"v":1,"room":"r","t":1`, wire.ErrDecode},
		{"wrong type", `{"v":"1","room":"r","t":1}`, wire.ErrDecode},
		{"version 0", `{"v":0,"room":"r","t":1,"seq":1,"dur":1000}`, wire.ErrVersion},
		{"version missing", `{"room":"r","t":1,"seq":1,"dur":1000}`, wire.ErrVersion},
		{"version too new", `{"v":3,"room":"r","t":1,"seq":1,"dur":250,"ms":1000}`, wire.ErrVersion},
		{"invalid room", `{"v":1,"room":"../x","t":1,"seq":1,"dur":1000}`, wire.ErrInvalid},
		{"negative second", `{"v":1,"room":"r","t":-5,"seq":1,"dur":1000}`, wire.ErrInvalid},
		{"too large", `{"v":1,"room":"r","pad":"` + strings.Repeat("x", 64<<10) + `"}`, wire.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wire.DecodeManifest([]byte(tt.in))
			if !errors.Is(err, tt.want) || !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("DecodeManifest err = %v, want %v", err, tt.want)
			}
			if got != nil {
				t.Fatalf("DecodeManifest returned %+v with an error", got)
			}
		})
	}
}

func stripOrder(ms []wire.Message) []wire.Message {
	if ms == nil {
		return nil
	}
	out := make([]wire.Message, len(ms))
	for i, m := range ms {
		m.Order = ""
		out[i] = m
	}
	return out
}

func messageListsEqual(a, b []wire.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !messagesEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// segmentsEqual compares segments treating nil and empty lists alike.
func segmentsEqual(a, b *wire.Segment) bool {
	ah, bh := *a, *b
	ah.Messages, bh.Messages = nil, nil
	return reflect.DeepEqual(ah, bh) && messageListsEqual(a.Messages, b.Messages)
}
