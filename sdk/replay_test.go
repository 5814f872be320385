package sdk

import (
	"context"
	"errors"
	"slices"
	"testing"

	"danmaku/sdk/wire"
)

// TestReplay reads segments from a fake CDN; TestReplaySubSecond, in the
// server module (internal/sdke2e), reads them from the origin.
func TestReplay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.autoEmpty = false
	const from = 1_600_000_000
	g1 := msgAt(from+1, 10, 0, KindGift, "")
	g2 := msgAt(from+1, 10, 1, KindGift, "")
	merged := g1
	merged.Count, merged.Merged = 2, []string{g1.ID, g2.ID} // both already passed on
	w.putSegment(from, 1, msgAt(from, 0, 0, KindBarrage, "a"), msgAt(from, 1, 0, KindBarrage, "b"))
	w.putSegment(from+1, 2, g1, g2)
	// from+2: no segment (404), skipped silently.
	w.lock(func() { w.segments[from+3] = []byte("junk") })
	w.putSegment(from+4, 4, merged, msgAt(from+4, 0, 0, KindSystem, "c"))
	w.putSegment(from+5, 5, msgAt(from+5, 0, 0, KindBarrage, "outside"))

	var got []string
	err := Replay(context.Background(), w.cdn.URL, testRoom, from, from+5, func(m Message) error {
		got = append(got, m.ID)
		return nil
	})
	want := []string{
		wire.FormatID(from*1000, 0), wire.FormatID(from*1000+1, 0),
		g1.ID, g2.ID,
		wire.FormatID((from+4)*1000, 0),
	}
	if !slices.Equal(got, want) {
		t.Errorf("replayed %v, want %v", got, want)
	}
	if !errors.Is(err, ErrReplay) || !errors.Is(err, wire.ErrDecode) {
		t.Errorf("Replay = %v, want the junk segment reported", err)
	}

	stop := errors.New("stop")
	n := 0
	err = Replay(context.Background(), w.cdn.URL+"/", testRoom, from, from+5, func(Message) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("Replay with a failing fn = %v after %d calls", err, n)
	}

	if err := Replay(context.Background(), w.cdn.URL, "bad/room", 0, 1, nil); !errors.Is(err, ErrReplay) {
		t.Errorf("Replay with a bad room = %v", err)
	}
}
