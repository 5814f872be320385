package stream_test

import (
	"testing"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/internal/stream/streamtest"
)

func TestMemoryStore(t *testing.T) {
	streamtest.Run(t, func(t *testing.T, clk *clock.Fake) stream.Store {
		s := stream.NewMemoryStore(clk)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// The suite must also pass for a store that ignores the fake clock, as a
// Redis store does: the memory store on the real clock stands in for it.
func TestMemoryStoreRealClock(t *testing.T) {
	streamtest.Run(t, func(t *testing.T, _ *clock.Fake) stream.Store {
		s := stream.NewMemoryStore(nil)
		t.Cleanup(func() { s.Close() })
		return s
	})
}
