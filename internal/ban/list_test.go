package ban_test

import (
	"context"
	"testing"
	"time"

	"danmaku/internal/ban"
	"danmaku/internal/clock"
)

// TestEventBans: a ban of an event covers the rooms the directory puts in
// that event, and no other; it is lifted by its scope and kept apart from
// the same user's every-room ban; without EventOf it covers nothing.
func TestEventBans(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := ban.NewMemoryStore()
	events := map[string]string{"stage": "show", "lobby": "show", "side": "other"}
	l, err := ban.NewList(ban.ListConfig{Store: store, Clock: clk, EventOf: func(room string) string { return events[room] }})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := ban.NewList(ban.ListConfig{Store: store, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	refresh := func() {
		t.Helper()
		for _, l := range []*ban.List{l, bare} {
			if err := l.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := store.Put(ctx, ban.Ban{User: "u", Event: "show", At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, ban.Ban{User: "u", Until: clk.Now().Add(time.Minute), At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, ban.Ban{User: "u", Room: "stage", Event: "show", At: clk.Now()}); err == nil {
		t.Fatal("a ban of a room and an event was taken")
	}
	refresh()
	clk.Advance(time.Minute) // the every-room ban lapses
	for room, want := range map[string]bool{"stage": true, "lobby": true, "side": false, "nowhere": false} {
		if got := l.Banned(room, "u"); got != want {
			t.Errorf("Banned(%s) = %v, want %v", room, got, want)
		}
		if bare.Banned(room, "u") {
			t.Errorf("without EventOf, %s is banned", room)
		}
	}
	if !l.Covers(ban.EventScope("show"), "lobby") || l.Covers(ban.EventScope("show"), "side") {
		t.Error("Covers disagrees with Banned")
	}
	bans, err := store.User(ctx, "u")
	if err != nil || len(bans) != 2 {
		t.Fatalf("User(u) = %+v, %v: want the every-room ban and the event's", bans, err)
	}
	if err := store.Delete(ctx, "u", ban.EventScope("show")); err != nil {
		t.Fatal(err)
	}
	refresh()
	if l.Banned("stage", "u") {
		t.Error("the lifted event ban still bites")
	}
}
