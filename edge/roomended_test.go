package edge

import (
	"context"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/event"
)

// TestRoomEnded: the edge closes the rooms of an ended or vanished event,
// not one whose event starts within the leeway by this node's clock
// (an edge 2 s behind the gslb told a show's first viewers it had ended).
func TestRoomEnded(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 20, 0, 0, 0, time.UTC)
	store := event.NewMemoryStore()
	for _, ev := range []event.Event{
		{ID: "soon", Start: now.Add(2 * time.Second), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "early"}}},
		{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "live"}}},
		{ID: "old", Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour), Rooms: []event.Room{{ID: "over"}}},
	} {
		if err := store.Create(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := event.NewDirectory(event.DirectoryConfig{Store: store, Clock: clock.NewFake(now)})
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for room, want := range map[string]bool{"early": false, "live": false, "over": true, "nowhere": true} {
		if got := roomEnded(dir, room); got != want {
			t.Errorf("roomEnded(%s) = %v, want %v", room, got, want)
		}
	}
	if err := dir.CheckIssued("early"); err != nil {
		t.Errorf("CheckIssued(early), 2 s before its start: %v", err)
	}
}
