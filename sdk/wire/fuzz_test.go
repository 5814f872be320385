package wire_test

import (
	"errors"
	"reflect"
	"testing"

	"danmaku/sdk/wire"
)

// Every decoder is fuzzed: it must never panic (nor exhaust memory), every
// error must wrap ErrDecode, and whatever it accepts must re-encode and decode
// to the same value.

func FuzzDecodeSegment(f *testing.F) {
	f.Add(mustEncodeSegment(f, sampleSegment()))
	f.Add(mustEncodeSegment(f, &wire.Segment{V: wire.Version, Room: "r", Second: 1, Seq: 1, Dur: wire.SegmentDuration}))
	f.Add(mustEncodeSegment(f, benchSegment(8)))
	f.Add(mustEncodeSegment(f, segWith(func(s *wire.Segment) { s.TakenDown = sampleTakenDown() })))
	f.Add(lengthBomb)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := wire.DecodeSegment(b)
		if err != nil {
			if !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			if s != nil {
				t.Fatal("segment returned with an error")
			}
			return
		}
		b2, err := wire.EncodeSegment(s)
		if err != nil {
			t.Fatalf("re-encode accepted segment: %v", err)
		}
		s2, err := wire.DecodeSegment(b2)
		if err != nil {
			t.Fatalf("decode re-encoded segment: %v", err)
		}
		if !segmentsEqual(s, s2) {
			t.Fatalf("re-encode changed the segment:\n got %+v\nwant %+v", s2, s)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(mustEncodeFrame(f, &wire.Frame{V: wire.Version, Room: "room_42", Messages: sampleMessages()}))
	f.Add(mustEncodeFrame(f, &wire.Frame{V: wire.Version, Room: "r"}))
	f.Add(mustEncodeFrame(f, &wire.Frame{V: wire.Version, Room: "r", TakenDown: sampleTakenDown()}))
	f.Add(lengthBomb)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := wire.DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			if fr != nil {
				t.Fatal("frame returned with an error")
			}
			return
		}
		b2, err := wire.EncodeFrame(fr)
		if err != nil {
			t.Fatalf("re-encode accepted frame: %v", err)
		}
		fr2, err := wire.DecodeFrame(b2)
		if err != nil {
			t.Fatalf("decode re-encoded frame: %v", err)
		}
		if fr.V != fr2.V || fr.Room != fr2.Room || !messageListsEqual(fr.Messages, fr2.Messages) || !reflect.DeepEqual(fr.TakenDown, fr2.TakenDown) {
			t.Fatalf("re-encode changed the frame:\n got %+v\nwant %+v", fr2, fr)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	for _, m := range []*wire.Manifest{
		{V: wire.Version, Room: "room_42", Second: 1700000000, Seq: 17, Dur: wire.SegmentDuration},
		{V: wire.Version, Room: "r"},
		{V: wire.Version, Room: "r", Second: 2, Seq: 2, Dur: wire.SegmentDuration, Takedowns: 12},
	} {
		b, err := wire.EncodeManifest(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"room":"r","t":1,"seq":1,"dur":1000,"future":[1,{"a":null}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := wire.DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, wire.ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			return
		}
		b2, err := wire.EncodeManifest(m)
		if err != nil {
			t.Fatalf("re-encode accepted manifest: %v", err)
		}
		m2, err := wire.DecodeManifest(b2)
		if err != nil {
			t.Fatalf("decode re-encoded manifest: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-encode changed the manifest: got %+v, want %+v", m2, m)
		}
	})
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"0-0", "1700000000123-4", "9223372036854775807-18446744073709551615", "", "-", "1-", "x-1", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, seq, err := wire.ParseID(s)
		if err != nil {
			if !errors.Is(err, wire.ErrBadID) {
				t.Fatalf("ParseID(%q) error %v does not wrap ErrBadID", s, err)
			}
			if wire.CompareIDs(s, "0-0") != -1 {
				t.Fatalf("malformed %q does not sort before every id", s)
			}
			return
		}
		if ms < 0 {
			t.Fatalf("ParseID(%q) accepted negative ms %d", s, ms)
		}
		id := wire.FormatID(ms, seq)
		ms2, seq2, err := wire.ParseID(id)
		if err != nil || ms2 != ms || seq2 != seq {
			t.Fatalf("ParseID(FormatID(%d, %d) = %q) = %d, %d, %v", ms, seq, id, ms2, seq2, err)
		}
		if c := wire.CompareIDs(s, id); c != 0 {
			t.Fatalf("CompareIDs(%q, %q) = %d, want 0", s, id, c)
		}
		if sec, err := wire.SecondOf(s); err != nil || sec != ms/1000 {
			t.Fatalf("SecondOf(%q) = %d, %v", s, sec, err)
		}
	})
}
