package wireprev_test

import (
	"encoding/json"
	"errors"
	"testing"

	"danmaku/internal/wireprev"
	"danmaku/sdk/wire"
)

// today's messages carry what the previous release did not know: the
// sender's playhead (p) and takedowns (already known to it).
func todaysMessages() []wire.Message {
	return []wire.Message{
		{ID: "1700000000123-0", Kind: wire.KindBarrage, Offset: 123, User: "u1", Nick: "小明", Text: "GOAL!!", Playhead: 1699999988123},
		{ID: "1700000000456-1", Kind: wire.KindGift, Offset: 456, User: "u2", Gift: "rocket", Value: 500, Count: 2,
			Merged: []string{"1700000000456-1", "1700000000600-0"}, Playhead: 1699999990000},
		{ID: "1700000000999-3", Kind: wire.KindSystem, Offset: 999, Text: "抽奖开始", Role: "host"},
	}
}

// sameAsBefore checks that the previous decoder read every field it knows
// of today's messages, and nothing else.
func sameAsBefore(t *testing.T, got []wireprev.Message, want []wire.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("previous decoder read %d messages, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || wire.Kind(g.Kind) != w.Kind || g.Offset != w.Offset || g.User != w.User || g.Nick != w.Nick ||
			g.Text != w.Text || g.Gift != w.Gift || g.Value != w.Value || g.Count != w.Count || g.Role != w.Role ||
			len(g.Merged) != len(w.Merged) {
			t.Errorf("message %d: previous decoder read %+v from %+v", i, g, w)
		}
	}
}

// TestPreviousReadsToday: what today's slicer and edge write — segments of
// every duration, frames and manifests with the playhead time — is read by
// the previous release's decoders, which ignore the fields they do not know.
func TestPreviousReadsToday(t *testing.T) {
	for _, dur := range []int64{1000, 500, 250} {
		seg := wire.NewSegment("room_42", dur, 1700000000000/dur, 7)
		seg.Messages = todaysMessages()
		seg.TakenDown = []wire.TakenDown{{ID: "1699999999000-0", Kind: wire.KindBarrage}}
		b, err := wire.EncodeSegment(seg)
		if err != nil {
			t.Fatal(err)
		}
		old, err := wireprev.DecodeSegment(b)
		if err != nil {
			t.Fatalf("%d ms segment: previous decoder: %v", dur, err)
		}
		if old.V != seg.V || old.StartMs() != seg.StartMs() || len(old.TakenDown) != 1 {
			t.Errorf("%d ms segment: previous decoder read v=%d start=%d td=%d", dur, old.V, old.StartMs(), len(old.TakenDown))
		}
		sameAsBefore(t, old.Messages, seg.Messages)

		m := wire.ManifestFor(seg)
		m.Takedowns = 1
		mb, err := wire.EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		om, err := wireprev.DecodeManifest(mb)
		if err != nil {
			t.Fatalf("%d ms manifest: previous decoder: %v", dur, err)
		}
		if om.Seq != m.Seq || om.StartMs() != m.StartMs() {
			t.Errorf("%d ms manifest: previous decoder read %+v from %+v", dur, om, m)
		}
	}
	fb, err := wire.EncodeFrame(&wire.Frame{V: wire.Version, Room: "room_42", Messages: todaysMessages()})
	if err != nil {
		t.Fatal(err)
	}
	of, err := wireprev.DecodeFrame(fb)
	if err != nil {
		t.Fatalf("frame: previous decoder: %v", err)
	}
	sameAsBefore(t, of.Messages, todaysMessages())
}

// TestPreviousRefusesNewer: a schema version newer than the previous release
// knows — the next format change, written by a newer slicer or edge — is
// refused by its decoders with ErrVersion: never a panic, never messages
// read from a layout it does not understand. Today's decoders refuse the
// version after theirs in the same way.
func TestPreviousRefusesNewer(t *testing.T) {
	seg := wire.NewSegment("room_42", 250, 1700000000000/250, 7)
	seg.Messages = todaysMessages()
	seg.V = wire.VersionSubSecond + 1
	b, err := wire.EncodeSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := wireprev.DecodeSegment(b); !errors.Is(err, wireprev.ErrVersion) || s != nil {
		t.Errorf("previous decoder, segment v=%d: %v, %v; want ErrVersion and nothing", seg.V, s, err)
	}
	if _, err := wire.DecodeSegment(b); !errors.Is(err, wire.ErrVersion) {
		t.Errorf("today's decoder, segment v=%d: %v; want ErrVersion", seg.V, err)
	}

	fb, err := wire.EncodeFrame(&wire.Frame{V: wire.Version + 1, Room: "room_42", Messages: todaysMessages()})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := wireprev.DecodeFrame(fb); !errors.Is(err, wireprev.ErrVersion) || f != nil {
		t.Errorf("previous decoder, frame v=%d: %v, %v; want ErrVersion and nothing", wire.Version+1, f, err)
	}
	if _, err := wire.DecodeFrame(fb); !errors.Is(err, wire.ErrVersion) {
		t.Errorf("today's decoder, frame v=%d: %v; want ErrVersion", wire.Version+1, err)
	}

	m := wire.ManifestFor(seg)
	mb, err := json.Marshal(m) // EncodeManifest may check the version; a newer writer would not
	if err != nil {
		t.Fatal(err)
	}
	if om, err := wireprev.DecodeManifest(mb); !errors.Is(err, wireprev.ErrVersion) || om != nil {
		t.Errorf("previous decoder, manifest v=%d: %v, %v; want ErrVersion and nothing", m.V, om, err)
	}
	if _, err := wire.DecodeManifest(mb); !errors.Is(err, wire.ErrVersion) {
		t.Errorf("today's decoder, manifest v=%d: %v; want ErrVersion", m.V, err)
	}

	lb, err := json.Marshal(wire.TakedownList{V: wire.Version + 1, Room: "room_42", N: 1, IDs: []wire.TakenDown{{ID: "1700000000123-0", Kind: wire.KindBarrage}}})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := wireprev.DecodeTakedownList(lb); !errors.Is(err, wireprev.ErrVersion) || l != nil {
		t.Errorf("previous decoder, takedown list v=%d: %v, %v; want ErrVersion and nothing", wire.Version+1, l, err)
	}
}
