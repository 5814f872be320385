package slicer

import (
	"context"
	"danmaku/internal/testwait"
	"io"
	"log/slog"
	"testing"
	"time"

	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// TestRoomEnds: the slicer leads only the rooms of live events; when the
// event ends, the room is written to its end (a gift sent just before is
// in a segment), the manifest is marked ended, the room's streams go, and
// nothing of the room is left running.
func TestRoomEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := stream.NewMemoryStore(nil)
	objects := objstore.NewMemoryStore()
	store := event.NewMemoryStore()
	now := time.Now()
	ev := event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "stage"}}}
	if err := store.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	dir, err := event.NewDirectory(event.DirectoryConfig{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Streams: streams, Objects: objects, Events: dir, Discover: 20 * time.Millisecond,
		Retention: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// A room nobody provisioned, with traffic: never led.
	if _, err := streams.Append(ctx, stream.Key{Room: "squatter", Lane: stream.Barrage}, []wire.Message{{Kind: wire.KindBarrage, Text: "x"}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitUntil(t, "the room to be led", func() bool { return s.RoomsRunning() == 1 })
	gift, err := streams.Append(ctx, stream.Key{Room: "stage", Lane: stream.Live}, []wire.Message{{Kind: wire.KindGift, User: "u", Gift: "rose", Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	ev.EndedAt = &ended
	if err := store.Update(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the room to finish", func() bool { return s.RoomsRunning() == 0 })

	obj, err := objects.Get(ctx, wire.ManifestKey("stage"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.DecodeManifest(obj.Body)
	if err != nil || !m.Ended {
		t.Fatalf("manifest %+v, %v: want ended", m, err)
	}
	// Every segment from the first to the last, the gift in exactly one.
	found := 0
	for seq, slot := m.Seq, m.Slot(); seq >= 1; seq, slot = seq-1, slot-1 {
		o, err := objects.Get(ctx, wire.SlotKey("stage", int64(m.Dur), slot))
		if err != nil {
			t.Fatalf("segment seq %d: %v", seq, err)
		}
		seg, _ := wire.DecodeSegment(o.Body)
		for _, msg := range seg.Messages {
			if msg.ID == gift[0].ID && msg.Kind == wire.KindGift {
				found++
			}
		}
	}
	if found != 1 {
		t.Fatalf("the gift is in %d segments, want 1", found)
	}
	if m.StartMs()+int64(m.Dur) < ended.UnixMilli()+endGrace.Milliseconds() {
		t.Fatalf("last segment ends at %d, before the event's end %d plus the grace", m.StartMs()+int64(m.Dur), ended.UnixMilli())
	}
	waitUntil(t, "the room's streams to expire", func() bool {
		last, err := streams.LastID(ctx, stream.Key{Room: "stage", Lane: stream.Live})
		return err == nil && last == "0-0"
	})
	rooms, _ := streams.Rooms(ctx)
	for _, r := range rooms {
		if r.ID == "stage" {
			t.Fatal("the ended room is still registered")
		}
	}
	if _, err := objects.Get(ctx, wire.ManifestKey("squatter")); err == nil {
		t.Fatal("a room of no event was written")
	}
	cancel()
	<-done
}

// waitUntil is testwait.For under the name this package's tests use.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, cond)
}
