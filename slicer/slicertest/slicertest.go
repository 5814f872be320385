// Package slicertest holds what fault tests of the slicer share: a producer
// of gifts and barrage that records what was accepted, and a checker that
// reads every segment of a room back.
package slicertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Producer appends gifts (some identical within a second, so they merge) and
// barrage to a room and remembers every gift the store accepted.
type Producer struct {
	Store stream.Store
	Room  string

	mu       sync.Mutex
	accepted []string // gift ids
	last     string
}

// Accepted returns the ids of every gift the store accepted, and the last.
func (p *Producer) Accepted() (ids []string, last string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.accepted...), p.last
}

func (p *Producer) Run(ctx context.Context, every time.Duration) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		gifts := []wire.Message{
			{Kind: wire.KindGift, User: fmt.Sprintf("fan%d", i%7), Gift: "rose", Value: 10, Order: fmt.Sprintf("o%d", i)},
			{Kind: wire.KindGift, User: "whale", Gift: "rocket", Value: 5000, Order: fmt.Sprintf("w%d", i)},
		}
		out, err := p.Store.Append(context.Background(), stream.Key{Room: p.Room, Lane: stream.Live}, gifts)
		if err != nil {
			// Not accepted: the ingest would have answered 503 and the
			// business server retried. Nothing to account for.
			continue
		}
		_, _ = p.Store.Append(context.Background(), stream.Key{Room: p.Room, Lane: stream.Barrage}, []wire.Message{{Kind: wire.KindBarrage, User: "v", Text: "hi"}})
		p.mu.Lock()
		for _, m := range out {
			p.accepted = append(p.accepted, m.ID)
			p.last = m.ID
		}
		p.mu.Unlock()
	}
}

// VerifySegments reads every segment of room up to the manifest's second
// once the manifest has passed lastID's second, and checks: no gap in
// seconds, seq +1 per second, every accepted gift exactly once.
func VerifySegments(t *testing.T, ctx context.Context, objects objstore.Store, room string, accepted []string, lastID string) (first, last int64) {
	t.Helper()
	lastSec, err := wire.SecondOf(lastID)
	if err != nil {
		t.Fatal(err)
	}
	var man *wire.Manifest
	for {
		if obj, err := objects.Get(ctx, wire.ManifestKey(room)); err == nil {
			if man, err = wire.DecodeManifest(obj.Body); err != nil {
				t.Fatal(err)
			}
			if man.Second > lastSec+1 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("manifest never passed second %d (at %+v)", lastSec, man)
		case <-time.After(100 * time.Millisecond):
		}
	}
	count := map[string]int{}
	sec, seq := man.Second, man.Seq
	for ; ; sec-- {
		obj, err := objects.Get(ctx, wire.SegmentKey(room, sec))
		if errors.Is(err, objstore.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seg, err := wire.DecodeSegment(obj.Body)
		if err != nil {
			t.Fatalf("second %d: %v", sec, err)
		}
		if seg.Seq != seq || seg.Second != sec {
			t.Fatalf("second %d has seq %d, want %d", sec, seg.Seq, seq)
		}
		for _, m := range seg.Messages {
			if m.Kind != wire.KindGift {
				continue
			}
			ids := m.Merged
			if len(ids) == 0 {
				ids = []string{m.ID}
			}
			for _, id := range ids {
				count[id]++
			}
		}
		if seq == 1 {
			break
		}
		seq--
	}
	if seq != 1 {
		t.Fatalf("segments stop at second %d with seq %d: a gap before it", sec+1, seq)
	}
	for _, id := range accepted {
		if count[id] != 1 {
			t.Fatalf("gift %s appears %d times", id, count[id])
		}
	}
	if len(count) != len(accepted) {
		t.Fatalf("segments hold %d gifts, %d were accepted", len(count), len(accepted))
	}
	return sec, man.Second
}
