package slicer

import (
	"math"
	"math/rand/v2"
	"sort"

	"danmaku/sdk/wire"
)

// The slot plan: what one slot's segment shows, what it carries to the next
// slot and what it settles, decided from the messages alone. No I/O, clock
// or global state: writeSlot plans, then writes, acknowledges and records.

// slotInput is what a slot is planned from.
type slotInput struct {
	// Carry is what earlier slots carried (never-droppable, unmerged,
	// oldest first); Fresh is the slot's own messages, in any order.
	Carry, Fresh []wire.Message
	// Budget is the slot's budget (slotBudget), Shares each queue's share.
	Budget int
	Shares Shares
	// HighGiftValue is the value × count from which a gift is high-value.
	HighGiftValue int64
	// TakenDown holds the identities of the messages taken down: they are
	// left out (settled, never shown).
	TakenDown map[string]bool
}

// slotPlan is a slot's decision. Every message of Inputs is in exactly one
// of Settled and Carry; Left ⊆ Settled.
type slotPlan struct {
	// Inputs is what was offered, in the order it was considered: Carry,
	// then Fresh in id order. reconcileSlot works on it when the slot
	// turns out to be written already.
	Inputs []wire.Message
	// Messages is the segment's contents: slim, identical gifts merged,
	// in id order.
	Messages []wire.Message
	// Carry is the never-droppable originals (gifts, system, site
	// broadcasts) that did not fit: the next slot's Carry, in order.
	Carry []wire.Message
	// Settled is the originals the segment settles once it is durable:
	// shown, or barrage sampled away.
	Settled []wire.Message
	// Left is the barrage sampled away (for the audit trail).
	Left []wire.Message
	// Got is how many messages each queue shows (a merged gift counts
	// once).
	Got [numQueues]int
	// TakenDown is the segment's td: the takedowns of the slot's takedown
	// entries, in order. Removed is the messages left out because they
	// were taken down. Both are in Settled.
	TakenDown []wire.TakenDown
	Removed   []wire.Message
}

// queueOf is the queue m belongs to.
func queueOf(m *wire.Message, highGiftValue int64) Queue {
	switch m.Kind {
	case wire.KindSystem:
		return QueueSystem
	case wire.KindGift:
		// Saturating value × count: an absurd value is high, never negative.
		v, c := m.Value, int64(max(m.Count, 1))
		if v >= highGiftValue || (v > 0 && c > math.MaxInt64/v) || v*c >= highGiftValue {
			return QueueHighGift
		}
		return QueueLowGift
	}
	return QueueBarrage
}

// planSlot plans one slot. Carried messages come first, then the slot's own
// in id order; identical gifts merge; site broadcasts join the system queue
// after the room's own, up to their quota or what the room's messages leave
// of the budget, whichever is more (siteQuota); the budget is allocated by
// queue (allocate); barrage beyond it is sampled with rng, everything else
// beyond it carries. Carry and Settled hold original (unmerged) messages,
// so a merged gift is never settled for a part that no segment holds.
func planSlot(in slotInput, rng *rand.Rand) slotPlan {
	fresh := sortByID(in.Fresh)
	inputs := make([]wire.Message, 0, len(in.Carry)+len(fresh))
	inputs = append(append(inputs, in.Carry...), fresh...)

	var (
		queues [numQueues][]wire.Message
		gifts  []wire.Message
		site   []wire.Message // site broadcasts, oldest first
		byID   = map[string]wire.Message{}
		p      = slotPlan{Inputs: inputs}
	)
	for _, m := range inputs {
		switch {
		case m.IsTakedown():
			p.TakenDown = append(p.TakenDown, m.TakenDown...)
			p.Settled = append(p.Settled, m)
		case !m.Site && in.TakenDown[m.Identity()]:
			p.Removed = append(p.Removed, m)
			p.Settled = append(p.Settled, m)
		case m.Site:
			site = append(site, m)
		case m.Kind == wire.KindGift:
			gifts = append(gifts, m)
			byID[m.Identity()] = m
		default:
			q := queueOf(&m, in.HighGiftValue)
			queues[q] = append(queues[q], m)
		}
	}
	for _, g := range mergeGifts(gifts) {
		q := queueOf(&g, in.HighGiftValue)
		queues[q] = append(queues[q], g)
	}

	own := 0
	for q := range numQueues {
		own += len(queues[q])
	}
	nsite := min(len(site), max(siteQuota(in.Budget, in.Shares), in.Budget-own))
	queues[QueueSystem] = append(queues[QueueSystem], site[:nsite]...)
	var need [numQueues]int
	for q := range numQueues {
		need[q] = len(queues[q])
	}
	p.Got = allocate(in.Budget, in.Shares, need)
	for q := range numQueues {
		p.take(q, queues[q], byID, rng)
	}
	p.Carry = append(p.Carry, site[nsite:]...)
	sort.SliceStable(p.Messages, func(i, j int) bool { return wire.CompareIDs(p.Messages[i].ID, p.Messages[j].ID) < 0 })
	return p
}

// take shows p.Got[q] of queue q's msgs: a droppable queue samples the
// rest away (settled, left), any other carries it (as originals).
func (p *slotPlan) take(q Queue, msgs []wire.Message, byID map[string]wire.Message, rng *rand.Rand) {
	if q.droppable() {
		kept, out := sampleOut(msgs, p.Got[q], rng)
		if p.Left == nil {
			p.Left = out // one droppable queue: no copy
		} else {
			p.Left = append(p.Left, out...)
		}
		p.Settled = append(p.Settled, msgs...)
		msgs = kept
	} else {
		for _, m := range msgs[p.Got[q]:] {
			p.Carry = appendOriginals(p.Carry, m, byID)
		}
		msgs = msgs[:p.Got[q]]
		for _, m := range msgs {
			p.Settled = appendOriginals(p.Settled, m, byID)
		}
	}
	for _, m := range msgs {
		p.Messages = append(p.Messages, wire.Slim(m))
	}
}

// appendOriginals appends what a (possibly merged) queue message stands
// for: itself, or the gifts it merged, by identity in byID.
func appendOriginals(dst []wire.Message, m wire.Message, byID map[string]wire.Message) []wire.Message {
	if len(m.Merged) == 0 {
		return append(dst, m)
	}
	for _, id := range m.Merged {
		dst = append(dst, byID[wire.IdentityOf(m.Kind, id)])
	}
	return dst
}

// reconcileSlot re-plans a slot that a predecessor already wrote: its
// segment (the identities has holds) is the truth. What it holds is settled;
// barrage it lacks is settled too (superseded: that slot's sampling
// stands), and so are takedown entries (the room's list carries them) and
// messages taken down (in takenDown); any other message it lacks is
// carried, in order.
func reconcileSlot(inputs []wire.Message, has, takenDown map[string]bool) (carry, settled []wire.Message, superseded int) {
	for _, m := range inputs {
		switch {
		case has[m.Identity()], m.IsTakedown(), !m.Site && takenDown[m.Identity()]:
			settled = append(settled, m)
		case m.Kind == wire.KindBarrage:
			superseded++
			settled = append(settled, m)
		default:
			carry = append(carry, m)
		}
	}
	return carry, settled, superseded
}

// slotBudget is the share of a per-second budget that one slot of dur ms
// gets: a viewer reads as much per second whatever the segment length. At
// least 1, so a short slot still carries a gift.
func slotBudget(perSecond int, dur int64) int {
	return max(1, int((int64(perSecond)*dur+500)/1000))
}

// sortByID orders msgs by id, parsing each id once (a comparator that parses
// both ids costs O(n log n) parses and moves whole messages around).
func sortByID(msgs []wire.Message) []wire.Message {
	type key struct {
		ms  int64
		seq uint64
		i   int
	}
	keys := make([]key, len(msgs))
	sorted := true
	for i := range msgs {
		ms, seq, _ := wire.ParseID(msgs[i].ID)
		keys[i] = key{ms, seq, i}
		if i > 0 && (ms < keys[i-1].ms || ms == keys[i-1].ms && seq < keys[i-1].seq) {
			sorted = false
		}
	}
	if sorted {
		return msgs
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].ms != keys[b].ms {
			return keys[a].ms < keys[b].ms
		}
		return keys[a].seq < keys[b].seq
	})
	out := make([]wire.Message, len(msgs))
	for i, k := range keys {
		out[i] = msgs[k.i]
	}
	return out
}
