package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/internal/wire"
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
