package slicer

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"danmaku/sdk/wire"
)

// Messages for the planner's tests: slot 1 of a 1000 ms grid holds ms
// 1000-1999; carried ones are of slot 0.

func barrageAt(ms int64, seq uint64) wire.Message {
	return wire.Message{ID: wire.FormatID(ms, seq), Kind: wire.KindBarrage, User: "b", Text: "hi"}
}

func giftAt(ms int64, seq uint64, user string, value int64) wire.Message {
	return wire.Message{ID: wire.FormatID(ms, seq), Kind: wire.KindGift, User: user, Gift: "rose", Value: value}
}

func systemAt(ms int64, seq uint64) wire.Message {
	return wire.Message{ID: wire.FormatID(ms, seq), Kind: wire.KindSystem, Text: "notice"}
}

func siteAt(ms int64, seq uint64) wire.Message {
	m := systemAt(ms, seq)
	m.Site = true
	return m
}

// run makes n messages with mk at ms, seq first, first+1, ...
func run(n int, first uint64, mk func(seq uint64) wire.Message) []wire.Message {
	out := make([]wire.Message, n)
	for i := range out {
		out[i] = mk(first + uint64(i))
	}
	return out
}

func takedownAt(ms int64, seq uint64, of string, k wire.Kind) wire.Message {
	return wire.Message{ID: wire.FormatID(ms, seq), Kind: wire.KindSystem, TakenDown: []wire.TakenDown{{ID: of, Kind: k}}}
}

func cat(parts ...[]wire.Message) []wire.Message { return slices.Concat(parts...) }

func ids(msgs []wire.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Identity()
	}
	return out
}

func TestPlanSlot(t *testing.T) {
	low := func(seq uint64) wire.Message { return giftAt(1000, seq, "u"+wire.FormatID(0, seq), 10) }
	high := func(seq uint64) wire.Message { return giftAt(1000, seq, "u"+wire.FormatID(0, seq), 5000) }
	sys := func(seq uint64) wire.Message { return systemAt(1000, seq) }
	bar := func(seq uint64) wire.Message { return barrageAt(1000, seq) }
	site := func(seq uint64) wire.Message { return siteAt(1000, seq) }
	oldLow := func(seq uint64) wire.Message { return giftAt(500, seq, "old"+wire.FormatID(0, seq), 10) }
	same := func(seq uint64) wire.Message { return giftAt(1000, seq, "fan", 10) }

	tests := []struct {
		name         string
		carry, fresh []wire.Message
		budget       int
		wantGot      [numQueues]int
		wantCarry    []wire.Message // in order
		wantLeft     int
		wantShown    int // segment messages (a merged gift once)
	}{
		{
			name:    "all fit",
			fresh:   cat(run(3, 0, sys), run(2, 10, high), run(2, 20, low), run(10, 30, bar)),
			budget:  60,
			wantGot: [numQueues]int{3, 2, 2, 10}, wantShown: 17,
		},
		{
			name:    "barrage over the budget is sampled, takes the unused shares",
			fresh:   run(25, 0, bar),
			budget:  10,
			wantGot: [numQueues]int{0, 0, 0, 10}, wantLeft: 15, wantShown: 10,
		},
		{
			name:    "low gifts over the budget carry, the newest",
			fresh:   run(15, 0, low),
			budget:  10,
			wantGot: [numQueues]int{0, 0, 10, 0}, wantCarry: run(5, 10, low), wantShown: 10,
		},
		{
			name:    "high gifts take the barrage budget before carrying",
			fresh:   cat(run(12, 0, high), run(5, 20, bar)),
			budget:  10,
			wantGot: [numQueues]int{0, 10, 0, 0}, wantCarry: run(2, 10, high), wantLeft: 5, wantShown: 10,
		},
		{
			name:    "system over the budget carries",
			fresh:   run(12, 0, sys),
			budget:  10,
			wantGot: [numQueues]int{10, 0, 0, 0}, wantCarry: run(2, 10, sys), wantShown: 10,
		},
		{
			name:    "priority: system, then high gifts, then low, then barrage",
			fresh:   cat(run(5, 0, sys), run(5, 10, high), run(5, 20, low), run(5, 30, bar)),
			budget:  4,
			wantGot: [numQueues]int{4, 0, 0, 0}, wantCarry: cat(run(1, 4, sys), run(5, 10, high), run(5, 20, low)), wantLeft: 5, wantShown: 4,
		},
		{
			name:    "priority: high gifts before low ones",
			fresh:   cat(run(5, 10, high), run(5, 20, low), run(5, 30, bar)),
			budget:  4,
			wantGot: [numQueues]int{0, 4, 0, 0}, wantCarry: cat(run(1, 14, high), run(5, 20, low)), wantLeft: 5, wantShown: 4,
		},
		{
			name:    "the carry goes first",
			carry:   run(3, 0, oldLow),
			fresh:   run(10, 0, low),
			budget:  5,
			wantGot: [numQueues]int{0, 0, 5, 0}, wantCarry: run(8, 2, low), wantShown: 5,
		},
		{
			name:    "identical gifts merge into one message",
			fresh:   run(5, 0, same),
			budget:  60,
			wantGot: [numQueues]int{0, 0, 1, 0}, wantShown: 1,
		},
		{
			name:    "a merged gift that does not fit carries as its originals",
			fresh:   cat(run(1, 0, sys), run(3, 10, same)),
			budget:  1,
			wantGot: [numQueues]int{1, 0, 0, 0}, wantCarry: run(3, 10, same), wantShown: 1,
		},
		{
			name:    "site broadcasts get their quota in a busy room, the rest carries after the room's own",
			fresh:   cat(run(10, 0, high), run(5, 20, site)),
			budget:  10,
			wantGot: [numQueues]int{1, 9, 0, 0}, wantCarry: cat(run(1, 9, high), run(4, 21, site)), wantShown: 10,
		},
		{
			name:    "site broadcasts take what an idle room leaves",
			fresh:   run(8, 20, site),
			budget:  10,
			wantGot: [numQueues]int{8, 0, 0, 0}, wantShown: 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slotInput{Carry: tt.carry, Fresh: tt.fresh, Budget: tt.budget, Shares: DefaultShares, HighGiftValue: 1000}
			p := planSlot(in, rand.New(rand.NewPCG(1, 2)))
			if p.Got != tt.wantGot {
				t.Errorf("got %v, want %v", p.Got, tt.wantGot)
			}
			if !slices.Equal(ids(p.Carry), ids(tt.wantCarry)) {
				t.Errorf("carry %v, want %v", ids(p.Carry), ids(tt.wantCarry))
			}
			if len(p.Left) != tt.wantLeft {
				t.Errorf("left %d, want %d", len(p.Left), tt.wantLeft)
			}
			if len(p.Messages) != tt.wantShown {
				t.Errorf("shown %d, want %d", len(p.Messages), tt.wantShown)
			}
			checkPlan(t, in, p)
		})
	}
}

func TestPlanSlotMergedGift(t *testing.T) {
	fresh := run(5, 0, func(seq uint64) wire.Message { return giftAt(1000, seq, "fan", 10) })
	p := planSlot(slotInput{Fresh: fresh, Budget: 60, Shares: DefaultShares, HighGiftValue: 1000}, rand.New(rand.NewPCG(1, 2)))
	if len(p.Messages) != 1 || p.Messages[0].Count != 5 || len(p.Messages[0].Merged) != 5 {
		t.Fatalf("merged %+v, want one message of count 5 listing 5 ids", p.Messages)
	}
	// Five of them at 10 are low-value, though 50 in all: the merge does
	// not move a gift up a queue it was not sent in.
	if p.Got[QueueLowGift] != 1 {
		t.Fatalf("got %v", p.Got)
	}
	if !slices.Equal(ids(p.Settled), ids(fresh)) {
		t.Fatalf("settled %v, want the 5 originals %v", ids(p.Settled), ids(fresh))
	}
}

func TestPlanSlotOrdersByID(t *testing.T) {
	fresh := []wire.Message{barrageAt(1500, 0), systemAt(1100, 0), giftAt(1300, 0, "a", 10), barrageAt(1200, 0)}
	carry := []wire.Message{giftAt(900, 0, "b", 10)}
	p := planSlot(slotInput{Carry: carry, Fresh: fresh, Budget: 60, Shares: DefaultShares, HighGiftValue: 1000}, rand.New(rand.NewPCG(1, 2)))
	want := []string{"l/900-0", "l/1100-0", "b/1200-0", "l/1300-0", "b/1500-0"}
	if got := ids(p.Messages); !slices.Equal(got, want) {
		t.Fatalf("segment order %v, want %v", got, want)
	}
	if got := ids(p.Inputs); !slices.Equal(got, []string{"l/900-0", "l/1100-0", "b/1200-0", "l/1300-0", "b/1500-0"}) {
		t.Fatalf("inputs %v: carry first, then the slot's own in id order", got)
	}
	if p.Messages[1].Offset != 100 {
		t.Fatalf("segment messages are slim (offset set): %+v", p.Messages[1])
	}
}

func TestPlanSlotDeterministic(t *testing.T) {
	fresh := run(1000, 0, func(seq uint64) wire.Message { return barrageAt(1000+int64(seq%900), seq) })
	in := slotInput{Fresh: fresh, Budget: 60, Shares: DefaultShares, HighGiftValue: 1000}
	a := planSlot(in, rand.New(rand.NewPCG(7, 8)))
	b := planSlot(in, rand.New(rand.NewPCG(7, 8)))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed, two plans")
	}
	c := planSlot(in, rand.New(rand.NewPCG(9, 10)))
	if slices.Equal(ids(a.Messages), ids(c.Messages)) {
		t.Fatal("two seeds sampled the same 60 of 1000")
	}
}

// TestPlanSlotTakedowns: a slot's takedown entries become its segment's td
// (in order, settled, never shown nor counted against the budget), and the
// messages taken down are left out of it, settled — gifts and carried ones
// too — whichever slot their takedown is in.
func TestPlanSlotTakedowns(t *testing.T) {
	carried := giftAt(500, 0, "a", 5000)
	fresh := []wire.Message{
		barrageAt(1000, 0), barrageAt(1000, 1), giftAt(1100, 2, "b", 10), systemAt(1200, 3),
		takedownAt(1300, 4, "1000-0", wire.KindBarrage), takedownAt(1400, 5, "900-9", wire.KindBarrage),
		siteAt(1500, 6),
	}
	in := slotInput{Carry: []wire.Message{carried}, Fresh: fresh, Budget: 60, Shares: DefaultShares, HighGiftValue: 1000,
		TakenDown: map[string]bool{"b/1000-0": true, "l/500-0": true, "l/1100-2": true, "b/900-9": true, "l/1000-1": true}}
	p := planSlot(in, rand.New(rand.NewPCG(1, 2)))
	checkPlan(t, in, p)
	if got, want := ids(p.Messages), []string{"b/1000-1", "l/1200-3", "s/1500-6"}; !slices.Equal(got, want) {
		t.Fatalf("segment %v, want %v", got, want)
	}
	if want := []wire.TakenDown{{ID: "1000-0", Kind: wire.KindBarrage}, {ID: "900-9", Kind: wire.KindBarrage}}; !slices.Equal(p.TakenDown, want) {
		t.Fatalf("td %v, want %v", p.TakenDown, want)
	}
	if got, want := ids(p.Removed), []string{"l/500-0", "b/1000-0", "l/1100-2"}; !slices.Equal(got, want) {
		t.Fatalf("removed %v, want %v", got, want)
	}
	if len(p.Carry) != 0 {
		t.Fatalf("carried %v", ids(p.Carry))
	}
	// Reconciled against a segment a predecessor wrote without them: the
	// takedown entries and the taken-down gift are settled, not carried.
	carry, settled, _ := reconcileSlot(p.Inputs, map[string]bool{"b/1000-1": true}, in.TakenDown)
	if got, want := ids(carry), []string{"l/1200-3", "s/1500-6"}; !slices.Equal(got, want) {
		t.Fatalf("reconciled carry %v, want %v", got, want)
	}
	if len(settled) != len(p.Inputs)-2 {
		t.Fatalf("reconciled settled %v", ids(settled))
	}
}

func TestReconcileSlot(t *testing.T) {
	inputs := []wire.Message{giftAt(500, 0, "a", 10), systemAt(1000, 0), barrageAt(1000, 1), barrageAt(1000, 2), giftAt(1000, 3, "b", 10), siteAt(1000, 4)}
	has := map[string]bool{"l/500-0": true, "b/1000-1": true}
	carry, settled, superseded := reconcileSlot(inputs, has, nil)
	if got, want := ids(carry), []string{"l/1000-0", "l/1000-3", "s/1000-4"}; !slices.Equal(got, want) {
		t.Fatalf("carry %v, want %v", got, want)
	}
	if got, want := ids(settled), []string{"l/500-0", "b/1000-1", "b/1000-2"}; !slices.Equal(got, want) {
		t.Fatalf("settled %v, want %v", got, want)
	}
	if superseded != 1 {
		t.Fatalf("superseded %d, want 1", superseded)
	}
}

// checkPlan asserts what holds of every plan: each offered message is
// either settled or carried, once; a settled one is shown or sampled away
// (barrage only), never both; gifts and system messages are never sampled
// away; the counts add up; nothing shown is over the budget.
func checkPlan(t *testing.T, in slotInput, p slotPlan) {
	t.Helper()
	offered := map[string]wire.Message{}
	for _, m := range cat(in.Carry, in.Fresh) {
		offered[m.Identity()] = m
	}
	if len(p.Inputs) != len(offered) {
		t.Fatalf("inputs %d, offered %d", len(p.Inputs), len(offered))
	}
	shown := identities(&wire.Segment{Messages: p.Messages})
	place := map[string]string{}
	put := func(what string, msgs []wire.Message) {
		for i := range msgs {
			id := msgs[i].Identity()
			if _, ok := offered[id]; !ok {
				t.Fatalf("%s %s was never offered", what, id)
			}
			if prev, dup := place[id]; dup {
				t.Fatalf("%s is %s and %s", id, prev, what)
			}
			place[id] = what
		}
	}
	put("carried", p.Carry)
	put("left", p.Left)
	put("removed", p.Removed)
	var entries, settledShown []wire.Message
	var td []wire.TakenDown
	for _, m := range p.Settled {
		switch {
		case m.IsTakedown():
			entries = append(entries, m)
			td = append(td, m.TakenDown...)
		case place[m.Identity()] != "left" && place[m.Identity()] != "removed":
			settledShown = append(settledShown, m)
		}
	}
	put("takedown", entries)
	put("shown", settledShown)
	if !slices.Equal(td, p.TakenDown) {
		t.Fatalf("segment td %v, want the entries' %v", p.TakenDown, td)
	}
	if len(place) != len(offered) {
		t.Fatalf("%d of %d offered messages placed", len(place), len(offered))
	}
	if len(p.Settled)+len(p.Carry) != len(offered) {
		t.Fatalf("settled %d + carried %d != offered %d", len(p.Settled), len(p.Carry), len(offered))
	}
	for id, m := range offered {
		switch where := place[id]; {
		case where == "shown" && !shown[id]:
			t.Fatalf("%s settled as shown, not in the segment", id)
		case where != "shown" && shown[id]:
			t.Fatalf("%s in the segment and %s", id, where)
		case where == "left" && (m.Kind != wire.KindBarrage || m.Site):
			t.Fatalf("%s (kind %v) was sampled away: only barrage may be", id, m.Kind)
		case (where == "removed") != (!m.Site && !m.IsTakedown() && in.TakenDown[id]):
			t.Fatalf("%s is %s; taken down: %v", id, where, in.TakenDown[id])
		}
	}
	sum, barrage := 0, 0
	for q := range numQueues {
		sum += p.Got[q]
	}
	for _, m := range p.Messages {
		if m.Kind == wire.KindBarrage {
			barrage++
		}
	}
	if sum != len(p.Messages) {
		t.Fatalf("queues got %v (%d), segment holds %d", p.Got, sum, len(p.Messages))
	}
	if barrage != p.Got[QueueBarrage] || barrage > in.Budget {
		t.Fatalf("%d barrage shown, got %d, budget %d", barrage, p.Got[QueueBarrage], in.Budget)
	}
	if sum > in.Budget {
		t.Fatalf("%d shown over a budget of %d", sum, in.Budget)
	}
	if len(p.Messages) != len(shown)-mergedExtra(p.Messages) {
		t.Fatalf("segment holds %d messages for %d identities", len(p.Messages), len(shown))
	}
	for i := 1; i < len(p.Messages); i++ {
		if wire.CompareIDs(p.Messages[i-1].ID, p.Messages[i].ID) > 0 {
			t.Fatalf("segment out of id order at %d", i)
		}
	}
}

// mergedExtra is how many identities merged messages add beyond their own.
func mergedExtra(msgs []wire.Message) int {
	n := 0
	for _, m := range msgs {
		if len(m.Merged) > 0 {
			n += len(m.Merged) - 1
		}
	}
	return n
}

// FuzzPlanSlot plans slots of arbitrary mixes — each byte one message: its
// kind, its sender (so gifts merge), carried or fresh, its time — under
// arbitrary budgets and shares, and checks checkPlan's invariants.
func FuzzPlanSlot(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 0x81, 0x82, 0x83}, uint16(60), uint8(10), uint8(30), uint8(20), uint8(40), uint64(1))
	f.Add([]byte("a mixed slot of gifts, barrage and broadcasts"), uint16(3), uint8(1), uint8(1), uint8(1), uint8(1), uint64(2))
	f.Add(make([]byte, 200), uint16(1), uint8(0), uint8(0), uint8(0), uint8(1), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, budget uint16, s0, s1, s2, s3 uint8, seed uint64) {
		in := slotInput{Budget: int(budget) + 1, HighGiftValue: 1000, TakenDown: map[string]bool{}}
		if sum := float64(s0) + float64(s1) + float64(s2) + float64(s3); sum > 0 {
			in.Shares = Shares{float64(s0) / sum, float64(s1) / sum, float64(s2) / sum, float64(s3) / sum}
		} else {
			in.Shares = DefaultShares
		}
		for i, b := range data {
			seq := uint64(i)
			ms := 1000 + int64(b)%13 // fresh: out of order
			user := []string{"a", "b", "c", "d"}[b>>5&3]
			var m wire.Message
			switch b % 5 {
			case 0:
				m = barrageAt(ms, seq)
			case 1:
				m = giftAt(ms, seq, user, 10)
			case 2:
				m = giftAt(ms, seq, user, 5000)
			case 3:
				m = systemAt(ms, seq)
			case 4:
				m = siteAt(ms, seq)
				if b&0x40 != 0 {
					// A takedown entry, of the message before.
					m = takedownAt(ms, seq, wire.FormatID(ms, max(seq, 1)-1), wire.Kind(b%3+1))
				}
			}
			if b&0x20 != 0 {
				in.TakenDown[m.Identity()] = true
			}
			if b&0x80 != 0 && m.Kind != wire.KindBarrage {
				m.ID = wire.FormatID(500, seq) // carried from the slot before
				in.Carry = append(in.Carry, m)
				continue
			}
			in.Fresh = append(in.Fresh, m)
		}
		p := planSlot(in, rand.New(rand.NewPCG(seed, seed)))
		checkPlan(t, in, p)
	})
}
