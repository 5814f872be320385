package ingest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
	"danmaku/slicer"
)

// The memory gift log forgets expired orders as it goes, so a day of gifts
// in a long-running embedded process does not pile up.
func TestMemoryGiftLogForgets(t *testing.T) {
	clk := clock.NewFake(t0)
	l, err := NewMemoryGiftLog(MemoryGiftLogConfig{Streams: stream.NewMemoryStore(clk), OrderTTL: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 100 {
		if _, _, err := l.AppendGift(ctx, room, fmt.Sprintf("o-%d", i), wire.Message{Kind: wire.KindGift}); err != nil {
			t.Fatal(err)
		}
	}
	// o-0 is appended again after its TTL: its first record's expiry entry
	// must not forget the second.
	clk.Advance(time.Minute)
	if _, dup, err := l.AppendGift(ctx, room, "o-0", wire.Message{Kind: wire.KindGift}); err != nil || dup {
		t.Fatalf("o-0 after its TTL: duplicate %v, %v", dup, err)
	}
	l.mu.Lock()
	orders, queued := len(l.orders), len(l.expiry)
	l.mu.Unlock()
	if orders != 1 || queued != 1 {
		t.Fatalf("after the TTL %d orders and %d expiries are kept, want 1 and 1", orders, queued)
	}
	clk.Advance(time.Second)
	if _, dup, err := l.AppendGift(ctx, room, "o-0", wire.Message{Kind: wire.KindGift}); err != nil || !dup {
		t.Fatalf("o-0 within its new TTL: duplicate %v, %v", dup, err)
	}
}

// SetBacklogBound replaces the bound of a gift log built before the rooms'
// settings were known; nil goes back to the default (30 s).
func TestSetBacklogBound(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	backlog := slicer.NewMemoryBacklog(clk)
	l, err := NewMemoryGiftLog(MemoryGiftLogConfig{Streams: stream.NewMemoryStore(clk), Clock: clk, Backlog: backlog})
	if err != nil {
		t.Fatal(err)
	}
	if err := backlog.Set(ctx, "r", 10, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	gift := wire.Message{Kind: wire.KindGift, User: "u", Gift: "rose", Value: 1}
	try := func(order string, wantRefused bool) {
		t.Helper()
		_, _, err := l.AppendGift(ctx, "r", order, gift)
		if refused := errors.Is(err, ErrGiftBacklog); refused != wantRefused || (err != nil && !refused) {
			t.Fatalf("order %s: err = %v, want refused %v", order, err, wantRefused)
		}
	}
	try("o1", false) // 10 s, default bound 30 s
	l.SetBacklogBound(func(room string) float64 { return 5 })
	try("o2", true)
	l.SetBacklogBound(nil)
	try("o2", false)
}
