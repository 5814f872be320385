package slicer

import (
	"math/rand/v2"
	"testing"

	"danmaku/sdk/wire"
)

func TestAllocate(t *testing.T) {
	tests := []struct {
		name   string
		budget int
		need   [numQueues]int
		want   [numQueues]int
	}{
		{"all fit", 60, [numQueues]int{1, 2, 3, 10}, [numQueues]int{1, 2, 3, 10}},
		{"nothing", 60, [numQueues]int{}, [numQueues]int{}},
		{"barrage takes unused shares", 60, [numQueues]int{0, 0, 0, 100}, [numQueues]int{0, 0, 0, 60}},
		{"low gifts borrow from barrage first", 60, [numQueues]int{5, 10, 40, 100}, [numQueues]int{5, 10, 40, 5}},
		{"high gifts borrow from low gifts, which carry", 60, [numQueues]int{0, 70, 10, 10}, [numQueues]int{0, 60, 0, 0}},
		{"system first", 10, [numQueues]int{12, 5, 5, 5}, [numQueues]int{10, 0, 0, 0}},
		{"shares when all overflow", 100, [numQueues]int{5, 20, 20, 1000}, [numQueues]int{5, 20, 20, 55}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allocate(tt.budget, DefaultShares, tt.need)
			if got != tt.want {
				t.Fatalf("allocate(%d, %v) = %v, want %v", tt.budget, tt.need, got, tt.want)
			}
			sum := 0
			for q := range numQueues {
				sum += got[q]
				if got[q] > tt.need[q] || got[q] < 0 {
					t.Fatalf("queue %v got %d of need %d", q, got[q], tt.need[q])
				}
			}
			if sum > tt.budget {
				t.Fatalf("allocated %d > budget %d", sum, tt.budget)
			}
		})
	}
}

func TestSampleKeepsOrderAndCount(t *testing.T) {
	var msgs []wire.Message
	for i := range 100 {
		msgs = append(msgs, wire.Message{ID: wire.FormatID(1000, uint64(i)), Kind: wire.KindBarrage})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	got := sample(msgs, 30, rng)
	if len(got) != 30 {
		t.Fatalf("kept %d, want 30", len(got))
	}
	for i := 1; i < len(got); i++ {
		if wire.CompareIDs(got[i-1].ID, got[i].ID) >= 0 {
			t.Fatalf("order broken at %d", i)
		}
	}
	if len(sample(msgs, 200, rng)) != 100 || len(sample(msgs, 0, rng)) != 0 {
		t.Fatal("edge cases wrong")
	}
}

func TestSampleIsUniform(t *testing.T) {
	// Each of 10 messages should be kept about half the time when 5 of 10 are kept.
	msgs := make([]wire.Message, 10)
	for i := range msgs {
		msgs[i].ID = wire.FormatID(1000, uint64(i))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	counts := map[string]int{}
	const rounds = 20000
	for range rounds {
		for _, m := range sample(msgs, 5, rng) {
			counts[m.ID]++
		}
	}
	for id, c := range counts {
		if c < rounds*45/100 || c > rounds*55/100 {
			t.Fatalf("message %s kept %d of %d times; not uniform", id, c, rounds)
		}
	}
}

func TestMergeGifts(t *testing.T) {
	g := func(id, user, gift string, value int64, count uint32) wire.Message {
		return wire.Message{ID: id, Kind: wire.KindGift, User: user, Gift: gift, Value: value, Count: count}
	}
	in := []wire.Message{
		g("1000-0", "u1", "rose", 10, 0),
		{ID: "1000-1", Kind: wire.KindSystem, Text: "hi"},
		g("1000-2", "u1", "rose", 10, 2),
		g("1000-3", "u2", "rose", 10, 1),
		g("1000-4", "u1", "rose", 20, 1),
		g("1000-5", "u1", "rose", 10, 1),
	}
	out := mergeGifts(in)
	if len(out) != 5 {
		t.Fatalf("got %d messages, want 5: %+v", len(out), out)
	}
	m := out[0]
	if m.ID != "1000-0" || m.Count != 2 || len(m.Merged) != 2 || m.Merged[0] != "1000-0" || m.Merged[1] != "1000-5" {
		t.Fatalf("merged = %+v", m)
	}
	if out[2].ID != "1000-2" || out[2].Merged != nil || out[2].Count != 2 {
		t.Fatalf("a combo (count 2) must stay on its own: %+v", out[2])
	}
	if out[3].Merged != nil || out[4].Merged != nil {
		t.Fatal("distinct gifts must not merge")
	}
	if in[0].Merged != nil {
		t.Fatal("input mutated")
	}
}
