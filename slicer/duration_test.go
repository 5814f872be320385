package slicer

import (
	"context"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// TestSegmentDurationChange: a room set from 1000 ms to 500 ms switches at
// its next whole second: one-second segments up to it, half-second ones
// (version 2, ms/ keys) from it, seq gap-free across, every message in the
// segment of its own time, a late redelivery of a message older than the
// switch settled against the one-second segment that holds it.
func TestSegmentDurationChange(t *testing.T) {
	ctx := context.Background()
	store := event.NewMemoryStore()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	ev := event.Event{ID: "ev", Start: fake.Now().Add(-time.Hour), End: fake.Now().Add(time.Hour), Rooms: []event.Room{{ID: room}}}
	if err := store.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	dir, err := event.NewDirectory(event.DirectoryConfig{Store: store, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, Config{Events: dir})
	r.clk.Set(fake.Now()) // one clock for the rig and the directory
	r.st, err = r.s.resume(ctx, room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	s0 := r.st.next
	if r.st.dur != 1000 {
		t.Fatalf("duration %d, want the default 1000", r.st.dur)
	}
	r.at(s0, 100)
	before := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, Text: "before"})[0]
	ev.Rooms[0].SegmentMs = 500
	if err := store.Update(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r.at(s0+1, 700) // in the second half of s0+1
	after := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, Text: "after"})[0]
	r.at(s0+2, 10)
	fake.Set(r.clk.Now())
	r.flush()

	// s0 was written as one second; the switch took effect at s0+1.
	first := r.segment(s0)
	if first.V != 1 || first.Dur != 1000 || len(first.Messages) != 1 || first.Messages[0].ID != before.ID {
		t.Fatalf("segment of s0: %+v", first)
	}
	if r.st.dur != 500 {
		t.Fatalf("duration after the switch %d, want 500", r.st.dur)
	}
	seq := first.Seq
	for i, start := range []int64{(s0 + 1) * 1000, (s0+1)*1000 + 500} {
		obj, err := r.objects.Get(ctx, wire.SlotKey(room, 500, start/500))
		if err != nil {
			t.Fatalf("half-second segment at %d: %v", start, err)
		}
		seg, err := wire.DecodeSegment(obj.Body)
		if err != nil || seg.V != 2 || seg.StartMs() != start || seg.Seq != seq+uint64(i)+1 {
			t.Fatalf("half-second segment at %d: %+v, %v", start, seg, err)
		}
		if wantAfter := i == 1; wantAfter != (len(seg.Messages) == 1 && seg.Messages[0].ID == after.ID) {
			t.Fatalf("segment at %d holds %v", start, seg.Messages)
		}
	}
	if m := r.manifest(); m.V != 2 || m.Dur != 500 || m.StartMs() != (s0+1)*1000+500 {
		t.Fatalf("manifest %+v", m)
	}

	// A redelivery of the message from before the switch is found in its
	// one-second segment, not written again.
	late := map[int64][]wire.Message{s0 * 1000: {before}}
	r.st.recent = map[int64]map[string]bool{} // force the read-back
	if err := r.s.settleLate(ctx, r.st, late); err != nil {
		t.Fatal(err)
	}
	if r.st.npending != 0 {
		t.Fatalf("a message already in its segment was held again: %v", r.st.pending)
	}
}
