package slicer

import (
	"math"
	"math/rand/v2"

	"danmaku/sdk/wire"
)

// Queue is a priority queue of the slicer, highest priority first.
type Queue int

const (
	QueueSystem Queue = iota
	QueueHighGift
	QueueLowGift
	QueueBarrage
	numQueues
)

var queueNames = [numQueues]string{"system", "high_gift", "low_gift", "barrage"}

func (q Queue) String() string { return queueNames[q] }

// droppable reports whether messages of q may be sampled away.
func (q Queue) droppable() bool { return q == QueueBarrage }

// Shares is each queue's share of the per-second budget.
type Shares [numQueues]float64

// DefaultShares gives system broadcasts 10 %, high-value gifts 30 %,
// low-value gifts 20 % and barrage 40 % of the budget.
var DefaultShares = Shares{0.10, 0.30, 0.20, 0.40}

// allocate splits budget between queues that need need[i] messages:
//  1. each queue gets up to its share;
//  2. unused share passes on, in priority order, to queues that need more;
//  3. a never-droppable queue that still needs more borrows from the queues
//     below it, lowest first, so gifts and system messages take the barrage
//     budget before anything of theirs carries over to the next second.
//
// What a never-droppable queue still cannot get carries over; what barrage
// cannot get is sampled away.
func allocate(budget int, shares Shares, need [numQueues]int) (got [numQueues]int) {
	used := 0
	for q := range numQueues {
		quota := max(int(float64(budget)*shares[q]), 0)
		got[q] = min(need[q], quota)
		used += got[q]
	}
	spare := max(budget-used, 0)
	for q := range numQueues {
		extra := min(need[q]-got[q], spare)
		got[q] += extra
		spare -= extra
	}
	for q := Queue(0); q < numQueues; q++ {
		if q.droppable() {
			continue
		}
		for lower := numQueues - 1; lower > q && got[q] < need[q]; lower-- {
			take := min(need[q]-got[q], got[lower])
			got[q] += take
			got[lower] -= take
		}
	}
	return got
}

// sample keeps k of msgs chosen uniformly at random, in their original
// order, and returns the kept ones.
func sample(msgs []wire.Message, k int, rng *rand.Rand) []wire.Message {
	kept, _ := sampleOut(msgs, k, rng)
	return kept
}

// sampleOut is sample that also returns the ones left out, in order.
func sampleOut(msgs []wire.Message, k int, rng *rand.Rand) (kept, out []wire.Message) {
	if k >= len(msgs) {
		return msgs, nil
	}
	if k <= 0 {
		return nil, msgs
	}
	keep := make([]bool, len(msgs))
	for _, j := range rng.Perm(len(msgs))[:k] {
		keep[j] = true
	}
	kept = make([]wire.Message, 0, k)
	out = make([]wire.Message, 0, len(msgs)-k)
	for j := range msgs {
		if keep[j] {
			kept = append(kept, msgs[j])
		} else {
			out = append(out, msgs[j])
		}
	}
	return kept, out
}

// mergeGifts merges identical single gifts (same user, gift and value) within
// one second into one message whose count is the number of ids it stands
// for. The merged message keeps the first one's id and position.
func mergeGifts(msgs []wire.Message) []wire.Message {
	type key struct {
		user, gift string
		value      int64
	}
	first := map[key]int{}
	out := msgs[:0:0]
	for _, m := range msgs {
		// Only single gifts merge, so a merged message's count always equals
		// the number of ids it lists: a client that showed some of them from
		// the edge can then show exactly the rest. A combo (count > 1) from
		// the business server already is one message.
		if m.Kind != wire.KindGift || m.Count > 1 {
			out = append(out, m)
			continue
		}
		k := key{m.User, m.Gift, m.Value}
		i, seen := first[k]
		if !seen {
			first[k] = len(out)
			out = append(out, m)
			continue
		}
		t := &out[i]
		if len(t.Merged) == 0 {
			t.Merged = []string{t.ID}
		}
		t.Merged = append(t.Merged, m.ID)
		t.Count = uint32(min(len(t.Merged), math.MaxUint32))
	}
	return out
}
