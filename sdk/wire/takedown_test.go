package wire_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"danmaku/sdk/wire"
)

func sampleTakenDown() []wire.TakenDown {
	return []wire.TakenDown{
		{ID: "1700000000123-0", Kind: wire.KindBarrage},
		{ID: "1699999999000-7", Kind: wire.KindGift},
	}
}

func TestTakenDownRoundTrip(t *testing.T) {
	seg := segWith(func(s *wire.Segment) { s.TakenDown = sampleTakenDown() })
	got, err := wire.DecodeSegment(mustEncodeSegment(t, seg))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.TakenDown, sampleTakenDown()) {
		t.Fatalf("segment td = %+v", got.TakenDown)
	}
	// A frame may carry only takedowns.
	fb := mustEncodeFrame(t, &wire.Frame{V: wire.Version, Room: "r", TakenDown: sampleTakenDown()})
	fr, err := wire.DecodeFrame(fb)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Messages) != 0 || !reflect.DeepEqual(fr.TakenDown, sampleTakenDown()) {
		t.Fatalf("frame = %+v", fr)
	}
	// No takedowns: the key is absent, so segments without any are
	// byte-for-byte what they were before td existed.
	b := mustEncodeSegment(t, sampleSegment())
	var generic map[string]any
	if err := msgpack.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	if _, ok := generic["td"]; ok {
		t.Fatal("td written for a segment without takedowns")
	}
	if got, err := wire.DecodeSegment(b); err != nil || got.TakenDown != nil {
		t.Fatalf("segment without td: %+v, %v", got, err)
	}
}

// TestTakenDownOldDecoder: a decoder that predates td (the segment and frame
// types without the field) reads a segment and frame carrying td unchanged.
func TestTakenDownOldDecoder(t *testing.T) {
	type oldSegment struct {
		V        int            `msgpack:"v"`
		Room     string         `msgpack:"room"`
		Second   int64          `msgpack:"t"`
		Seq      uint64         `msgpack:"seq"`
		Dur      uint32         `msgpack:"dur"`
		Messages []wire.Message `msgpack:"m"`
	}
	seg := segWith(func(s *wire.Segment) { s.TakenDown = sampleTakenDown() })
	var old oldSegment
	if err := msgpack.Unmarshal(mustEncodeSegment(t, seg), &old); err != nil {
		t.Fatal(err)
	}
	if old.Room != seg.Room || old.Seq != seg.Seq || !messageListsEqual(old.Messages, stripOrder(seg.Messages)) {
		t.Fatalf("old decoder read %+v", old)
	}
	type oldManifest struct {
		V    int    `json:"v"`
		Room string `json:"room"`
		Seq  uint64 `json:"seq"`
	}
	mb, err := wire.EncodeManifest(&wire.Manifest{V: 1, Room: "r", Second: 1, Seq: 3, Dur: 1000, Takedowns: 4})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"room":"r","t":1,"seq":3,"dur":1000,"td":4}`; string(mb) != want {
		t.Fatalf("manifest JSON = %s, want %s", mb, want)
	}
	m, err := wire.DecodeManifest(mb)
	if err != nil || m.Takedowns != 4 {
		t.Fatalf("manifest td: %+v, %v", m, err)
	}
	// A manifest reader that predates td reads the rest unchanged.
	var om oldManifest
	if err := json.Unmarshal(mb, &om); err != nil || om.V != 1 || om.Room != "r" || om.Seq != 3 {
		t.Fatalf("old manifest reader: %+v, %v", om, err)
	}
}

func TestTakenDownRejects(t *testing.T) {
	bad := []struct {
		name string
		td   wire.TakenDown
	}{
		{"empty id", wire.TakenDown{Kind: wire.KindBarrage}},
		{"malformed id", wire.TakenDown{ID: "12", Kind: wire.KindBarrage}},
		{"kind 0", wire.TakenDown{ID: "1-0"}},
		{"unknown kind", wire.TakenDown{ID: "1-0", Kind: wire.KindSystem + 1}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			tds := append(sampleTakenDown(), tt.td)
			if wire.ValidTakenDown(tt.td) {
				t.Fatal("ValidTakenDown accepted it")
			}
			_, err := wire.DecodeSegment(mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.TakenDown = tds })))
			if !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("segment: err = %v, want ErrInvalid", err)
			}
			_, err = wire.DecodeFrame(mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.TakenDown = tds })))
			if !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("frame: err = %v, want ErrInvalid", err)
			}
			b, err := wire.EncodeTakedownList(&wire.TakedownList{V: 1, Room: "r", N: 3, IDs: tds})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := wire.DecodeTakedownList(b); !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("list: err = %v, want ErrInvalid", err)
			}
		})
	}
	t.Run("takedown entry among messages", func(t *testing.T) {
		// A live lane's takedown entry never reaches a segment's or
		// frame's m.
		_, err := wire.DecodeSegment(mustEncodeSegment(t, segWith(func(s *wire.Segment) { s.Messages[1].TakenDown = sampleTakenDown() })))
		if !errors.Is(err, wire.ErrInvalid) {
			t.Fatalf("segment: err = %v, want ErrInvalid", err)
		}
		_, err = wire.DecodeFrame(mustEncodeFrame(t, frameWith(func(f *wire.Frame) { f.Messages[0].TakenDown = sampleTakenDown() })))
		if !errors.Is(err, wire.ErrInvalid) {
			t.Fatalf("frame: err = %v, want ErrInvalid", err)
		}
	})
	t.Run("td not a list", func(t *testing.T) {
		b, err := msgpack.Marshal(map[string]any{"v": 1, "room": "r", "t": 1, "seq": 1, "dur": 1000, "m": []any{}, "td": "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wire.DecodeSegment(b); !errors.Is(err, wire.ErrDecode) {
			t.Fatalf("err = %v, want ErrDecode", err)
		}
	})
}

func TestTakedownList(t *testing.T) {
	if got := wire.TakedownListKey("room_42"); got != "rooms/room_42/takedowns.json" {
		t.Fatalf("key = %q", got)
	}
	l := &wire.TakedownList{V: 1, Room: "room_42", N: 2, IDs: sampleTakenDown()}
	b, err := wire.EncodeTakedownList(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"room":"room_42","n":2,"ids":[{"id":"1700000000123-0","k":1},{"id":"1699999999000-7","k":2}]}`
	if string(b) != want {
		t.Fatalf("list JSON = %s, want %s", b, want)
	}
	got, err := wire.DecodeTakedownList(b)
	if err != nil || !reflect.DeepEqual(got, l) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	empty, err := wire.EncodeTakedownList(&wire.TakedownList{V: 1, Room: "r"})
	if err != nil || string(empty) != `{"v":1,"room":"r","n":0,"ids":[]}` {
		t.Fatalf("empty list = %s, %v", empty, err)
	}
	for name, tt := range map[string]struct {
		in   string
		want error
	}{
		"empty":       {``, wire.ErrDecode},
		"version 0":   {`{"v":0,"room":"r","n":0,"ids":[]}`, wire.ErrVersion},
		"version 2":   {`{"v":2,"room":"r","n":0,"ids":[]}`, wire.ErrVersion},
		"bad room":    {`{"v":1,"room":"a/b","n":0,"ids":[]}`, wire.ErrInvalid},
		"n below ids": {`{"v":1,"room":"r","n":0,"ids":[{"id":"1-0","k":1}]}`, wire.ErrInvalid},
		"negative n":  {`{"v":1,"room":"r","n":-1,"ids":[]}`, wire.ErrDecode},
		"too large":   {`{"v":1,"room":"r","pad":"` + strings.Repeat("x", wire.MaxTakedownListBytes) + `"}`, wire.ErrTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := wire.DecodeTakedownList([]byte(tt.in))
			if !errors.Is(err, tt.want) || !errors.Is(err, wire.ErrDecode) || got != nil {
				t.Fatalf("got %+v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func FuzzDecodeTakedownList(f *testing.F) {
	f.Add([]byte(`{"v":1,"room":"room_42","n":2,"ids":[{"id":"1700000000123-0","k":1},{"id":"1-7","k":2}]}`))
	f.Add([]byte(`{"v":1,"room":"r","n":0,"ids":[]}`))
	f.Add([]byte(`{"v":1,"room":"r","n":1,"ids":[{"id":"x","k":1}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := wire.DecodeTakedownList(b)
		if err != nil {
			if !errors.Is(err, wire.ErrDecode) || l != nil {
				t.Fatalf("error %v (list %v)", err, l)
			}
			return
		}
		b2, err := wire.EncodeTakedownList(l)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := wire.DecodeTakedownList(b2)
		if err != nil || !reflect.DeepEqual(l, l2) {
			t.Fatalf("re-encode changed the list: %+v, %v; want %+v", l2, err, l)
		}
	})
}
