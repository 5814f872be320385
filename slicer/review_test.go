package slicer

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Regression tests for faults found in review: each names the scenario.

func TestReclaimOfManyPendingTerminates(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{NodeID: "a"})
	s0 := r.st.next
	r.at(s0, 100)
	var in []wire.Message
	for i := range 3000 {
		in = append(in, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Text: "x"})
	}
	r.append(stream.Barrage, in...)
	if _, _, err := r.s.read(ctx, r.st); err != nil { // pending under "a"
		t.Fatal(err)
	}
	b, _ := New(Config{NodeID: "b", Streams: r.streams, Objects: r.objects, Clock: r.clk})
	st, err := b.resume(ctx, room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.reclaim(ctx, st, 0) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("reclaim of 3000 pending entries did not return")
	}
	if st.npending != 3000 {
		t.Fatalf("holds %d messages, want 3000 exactly once", st.npending)
	}
}

func TestTrimNeverPassesUnreadEntries(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0, 100)
	g1 := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "a", Gift: "rose", Value: 1})
	if _, _, err := r.s.read(ctx, r.st); err != nil {
		t.Fatal(err)
	}
	// g2 lands in second s0 after the read; s0 is written without it.
	r.at(s0, 900)
	g2 := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "b", Gift: "rose", Value: 1})
	r.at(s0+1, 400)
	if err := r.s.writeSlot(ctx, r.st, r.clk.Now(), r.clk.Now()); err != nil {
		t.Fatal(err)
	}
	left, _ := r.streams.Read(ctx, stream.Key{Room: room, Lane: stream.Live}, "0", 0, 0)
	if len(left) != 1 || left[0].ID != g2[0].ID {
		t.Fatalf("trim removed an unread gift: stream holds %v", left)
	}
	r.at(s0+2, 400)
	r.flush()
	count := map[string]int{}
	for sec := s0; sec <= s0+1; sec++ {
		for _, m := range r.segment(sec).Messages {
			count[m.ID]++
		}
	}
	if count[g1[0].ID] != 1 || count[g2[0].ID] != 1 {
		t.Fatalf("counts %v", count)
	}
}

func TestDeposedLeadersLateReadsAreClaimed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{NodeID: "a"})
	s0 := r.st.next
	// B takes over; A has not noticed and reads one more time.
	b, _ := New(Config{NodeID: "b", Streams: r.streams, Objects: r.objects, Clock: r.clk})
	st, err := b.resume(ctx, room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.reclaim(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	r.at(s0, 100)
	gs := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "x", Gift: "rose", Value: 1})
	if _, _, err := r.s.read(ctx, r.st); err != nil { // A steals it, then dies
		t.Fatal(err)
	}
	r.s, r.st = b, st
	r.at(s0, 500)
	other := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "y", Gift: "rose", Value: 1})
	r.at(s0+1, 400)
	r.flush() // B writes s0 with the other gift only; the trim must keep A's
	left, _ := r.streams.Read(ctx, stream.Key{Room: room, Lane: stream.Live}, "0", 0, 0)
	if len(left) == 0 || left[0].ID != gs[0].ID {
		t.Fatalf("trim removed the deposed leader's pending gift: %v", left)
	}
	if c := len(r.segment(s0).Messages); c != 1 || r.segment(s0).Messages[0].ID != other[0].ID {
		t.Fatalf("segment %d = %v", s0, r.segment(s0).Messages)
	}
	// Two lease lifetimes later B claims it and writes it once.
	r.clk.Advance(3 * b.cfg.LeaseTTL)
	if err := b.reclaim(ctx, st, 2*b.cfg.LeaseTTL); err != nil {
		t.Fatal(err)
	}
	r.flush()
	found := 0
	for sec := s0; sec < st.next; sec++ {
		for _, m := range r.segment(sec).Messages {
			if m.ID == gs[0].ID {
				found++
			}
		}
	}
	if found != 1 {
		t.Fatalf("gift written %d times", found)
	}
}

func TestMergedGiftAgainstExistingSegment(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0, 100)
	gs := r.append(stream.Live,
		wire.Message{Kind: wire.KindGift, User: "u", Gift: "rose", Value: 1},
		wire.Message{Kind: wire.KindGift, User: "u", Gift: "rose", Value: 1})
	// The predecessor's segment holds only the first of the two.
	r.putSegment(s0, 1, gs[0])
	r.at(s0+2, 400)
	r.flush()
	count := map[string]int{}
	for sec := s0; sec <= s0+1; sec++ {
		for _, m := range r.segment(sec).Messages {
			ids := m.Merged
			if len(ids) == 0 {
				ids = []string{m.ID}
			}
			for _, id := range ids {
				count[id]++
			}
		}
	}
	if count[gs[0].ID] != 1 || count[gs[1].ID] != 1 {
		t.Fatalf("counts %v, want each gift once", count)
	}
}

func TestBudgetBounds(t *testing.T) {
	r := newRig(t, Config{})
	for _, c := range []struct {
		budget int
		shares Shares
	}{
		{math.MaxInt, Shares{0, 0, 0, 1}},
		{maxBudget + 1, DefaultShares},
		{60, Shares{math.NaN(), 0, 0, 1}},
		{60, Shares{-0.5, 0.5, 0.5, 0.5}},
	} {
		if err := r.s.SetBudget(c.budget, c.shares); err == nil {
			t.Fatalf("SetBudget(%d, %v) accepted", c.budget, c.shares)
		}
	}
	if err := r.s.SetBudget(maxBudget, Shares{0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	r.at(r.st.next+1, 400)
	r.flush() // an empty second with the largest budget must not panic
}

func TestSameNodeIDNeverLeadsTwice(t *testing.T) {
	lease := NewMemoryLease(nil)
	a, _ := New(Config{NodeID: "same", Streams: stream.NewMemoryStore(nil), Objects: objstore.NewMemoryStore(), Lease: lease})
	b, _ := New(Config{NodeID: "same", Streams: stream.NewMemoryStore(nil), Objects: objstore.NewMemoryStore(), Lease: lease})
	ctx := context.Background()
	okA, _ := lease.Acquire(ctx, room, a.holder, time.Minute)
	okB, _ := lease.Acquire(ctx, room, b.holder, time.Minute)
	if !okA || okB {
		t.Fatalf("acquire: a=%v b=%v; two processes with one node id both lead", okA, okB)
	}
}

func TestHugeGiftValueIsHigh(t *testing.T) {
	r := newRig(t, Config{})
	m := wire.Message{Kind: wire.KindGift, Value: math.MaxInt64 / 2, Count: 7}
	if q := queueOf(&m, r.s.cfg.HighGiftValue); q != QueueHighGift {
		t.Fatalf("overflowing value × count went to %v", q)
	}
}
