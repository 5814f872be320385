package wire_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"danmaku/sdk/wire"
)

// TestSubSecondSegments: a 500 ms or 250 ms room writes version-2 segments
// with their start in ms, under keys a one-second reader never asks for; a
// one-second room's segments stay version 1, byte for byte as before.
func TestSubSecondSegments(t *testing.T) {
	const room = "r1"
	tests := []struct {
		dur     int64
		slot    int64
		key     string
		v       int
		start   int64
		second  int64
		topKeys []string
	}{
		{1000, 1700000003, "rooms/r1/s/1700000003.msgpack", 1, 1700000003000, 1700000003, []string{"dur", "m", "room", "seq", "t", "v"}},
		{500, 3400000007, "rooms/r1/ms/1700000003500.msgpack", 2, 1700000003500, 1700000003, []string{"dur", "m", "ms", "room", "seq", "t", "v"}},
		{250, 6800000013, "rooms/r1/ms/1700000003250.msgpack", 2, 1700000003250, 1700000003, []string{"dur", "m", "ms", "room", "seq", "t", "v"}},
	}
	for _, tt := range tests {
		seg := wire.NewSegment(room, tt.dur, tt.slot, 9)
		if got := wire.SlotKey(room, tt.dur, tt.slot); got != tt.key {
			t.Errorf("SlotKey(%d, %d) = %q, want %q", tt.dur, tt.slot, got, tt.key)
		}
		if seg.V != tt.v || seg.StartMs() != tt.start || seg.Second != tt.second || seg.Slot() != tt.slot {
			t.Errorf("NewSegment(%d, %d) = %+v", tt.dur, tt.slot, seg)
		}
		b, err := wire.EncodeSegment(seg)
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]any
		if err := msgpack.Unmarshal(b, &top); err != nil {
			t.Fatal(err)
		}
		if got := sortedKeys(top); !slices.Equal(got, tt.topKeys) {
			t.Errorf("dur %d: keys %v, want %v", tt.dur, got, tt.topKeys)
		}
		back, err := wire.DecodeSegment(b)
		if err != nil || back.StartMs() != tt.start || back.Slot() != tt.slot || int64(back.Dur) != tt.dur {
			t.Fatalf("dur %d: decoded %+v, %v", tt.dur, back, err)
		}
		m, err := wire.DecodeManifest(mustManifest(t, wire.ManifestFor(seg)))
		if err != nil || m.StartMs() != tt.start || m.Slot() != tt.slot || m.V != tt.v {
			t.Fatalf("dur %d: manifest %+v, %v", tt.dur, m, err)
		}
	}
}

// TestSubSecondHeaderRejects: a header whose duration, start and version
// disagree is refused, so a reader never files a segment on the wrong slot.
func TestSubSecondHeaderRejects(t *testing.T) {
	for name, seg := range map[string]*wire.Segment{
		"v1 with 500 ms":        {V: 1, Room: "r", Second: 1, Seq: 1, Dur: 500},
		"v2 with 1000 ms":       {V: 2, Room: "r", Second: 1, Seq: 1, Dur: 1000, Start: 1000},
		"v2 with 300 ms":        {V: 2, Room: "r", Second: 0, Seq: 1, Dur: 300, Start: 600},
		"v2 start off the grid": {V: 2, Room: "r", Second: 1, Seq: 1, Dur: 500, Start: 1250},
		"v2 start in another t": {V: 2, Room: "r", Second: 2, Seq: 1, Dur: 500, Start: 1500},
		"v2 without start":      {V: 2, Room: "r", Second: 1, Seq: 1, Dur: 250},
	} {
		b, err := wire.EncodeSegment(seg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wire.DecodeSegment(b); !errors.Is(err, wire.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// A one-second room's early segments may lack dur: read as 1000.
	b, _ := wire.EncodeSegment(&wire.Segment{V: 1, Room: "r", Second: 5, Seq: 1})
	seg, err := wire.DecodeSegment(b)
	if err != nil || seg.Dur != 1000 || seg.Slot() != 5 {
		t.Fatalf("v1 without dur: %+v, %v", seg, err)
	}
}

func mustManifest(t *testing.T, m *wire.Manifest) []byte {
	t.Helper()
	b, err := wire.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTiming(t *testing.T) {
	tm := wire.Timing{SegmentMs: 500, PublishDelayMs: 100}
	for _, tc := range []struct{ ms, slot int64 }{{0, 0}, {499, 0}, {500, 1}, {-1, -1}, {-500, -1}, {-501, -2}} {
		if got := tm.SlotOf(tc.ms); got != tc.slot {
			t.Errorf("SlotOf(%d) = %d, want %d", tc.ms, got, tc.slot)
		}
	}
	if tm.End(3) != 2000 || tm.Due(3) != 2100 {
		t.Errorf("End(3), Due(3) = %d, %d", tm.End(3), tm.Due(3))
	}
	// Slot 3 ([1500, 2000)) is due from 2100: at 2099 the newest due is 2.
	if tm.LiveSlot(2099) != 2 || tm.LiveSlot(2100) != 3 {
		t.Errorf("LiveSlot(2099), LiveSlot(2100) = %d, %d", tm.LiveSlot(2099), tm.LiveSlot(2100))
	}
}
