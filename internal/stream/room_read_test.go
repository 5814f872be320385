package stream_test

import (
	"context"
	"testing"

	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// TestRoomReads: DrainRoom reads the clock and both lanes in one step —
// whatever was appended before the time it answers is delivered by it or
// before — on every Store.
func TestRoomReads(t *testing.T) {
	for name, open := range map[string]func(*testing.T) stream.Store{
		"memory": func(*testing.T) stream.Store { return stream.NewMemoryStore(nil) },
		"redis": func(t *testing.T) stream.Store {
			s, err := stream.NewRedisStore(stream.RedisConfig{Client: redistest.Client(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			app := func(lane stream.Lane, text string) wire.Message {
				out, err := s.Append(ctx, stream.Key{Room: "r", Lane: lane}, []wire.Message{{Kind: kindOf(lane), Text: text, Gift: "g"}})
				if err != nil {
					t.Fatal(err)
				}
				return out[0]
			}
			// Nothing yet (the groups are created on the way).
			now, b, l, err := s.DrainRoom(ctx, "r", "g", "c", 100)
			if err != nil || len(b)+len(l) != 0 || now.IsZero() {
				t.Fatalf("empty drain: %v %v %v %v", now, b, l, err)
			}
			m1 := app(stream.Barrage, "one")
			m2 := app(stream.Live, "two")
			now, b, l, err = s.DrainRoom(ctx, "r", "g", "c", 100)
			if err != nil || len(b) != 1 || len(l) != 1 || b[0].ID != m1.ID || l[0].ID != m2.ID {
				t.Fatalf("drain: %v %v %v", b, l, err)
			}
			if ms, _, _ := wire.ParseID(m2.ID); now.UnixMilli() < ms {
				t.Fatalf("drain time %d is before an entry it delivered (%s)", now.UnixMilli(), m2.ID)
			}
			// Delivered once: the next drain has nothing.
			if _, b, l, _ = s.DrainRoom(ctx, "r", "g", "c", 100); len(b)+len(l) != 0 {
				t.Fatalf("delivered twice: %v %v", b, l)
			}
			// Count bounds each lane.
			for i := range 5 {
				app(stream.Barrage, string(rune('a'+i)))
			}
			if _, b, _, _ := s.DrainRoom(ctx, "r", "g", "c", 2); len(b) != 2 {
				t.Fatalf("count 2 drained %d", len(b))
			}
		})
	}
}

func kindOf(l stream.Lane) wire.Kind {
	if l == stream.Barrage {
		return wire.KindBarrage
	}
	return wire.KindGift
}
