package slicer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"danmaku/ingest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// turn is one turn of lead's loop on the rig's clock: read (or, stopped at
// maxPending, pass the slots on), write every complete slot, publish the
// gift backlog.
func (r *rig) turn() {
	r.t.Helper()
	ctx := context.Background()
	now := r.clk.Now()
	for {
		again, err := r.s.advance(ctx, r.st, now)
		if err != nil {
			r.t.Fatal(err)
		}
		if !again {
			break
		}
	}
	for r.s.complete(r.st) {
		if err := r.s.writeSlot(ctx, r.st, r.st.readUpTo, now); err != nil {
			r.t.Fatal(err)
		}
	}
	r.s.publishBacklog(ctx, r.st)
}

// inSegments counts, per gift id, the segments from second from up to the
// last written that hold it (merged ones included).
func (r *rig) inSegments(from int64) map[string]int {
	r.t.Helper()
	n := map[string]int{}
	for sec := from; sec < r.st.next; sec++ {
		for _, m := range r.segment(sec).Messages {
			if m.Kind != wire.KindGift {
				continue
			}
			n[m.ID]++
			for _, id := range m.Merged {
				if id != m.ID {
					n[id]++
				}
			}
		}
	}
	return n
}

// checkOnce fails unless every id of want is in exactly one segment, and
// nothing else is.
func checkOnce(t *testing.T, got map[string]int, want []string) {
	t.Helper()
	for _, id := range want {
		if got[id] != 1 {
			t.Fatalf("gift %s is in %d segments, want 1", id, got[id])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("segments hold %d gifts, want the %d accepted", len(got), len(want))
	}
}

func flood(n int, tag string) []wire.Message {
	out := make([]wire.Message, n)
	for i := range out {
		// A user each: identical gifts of one user would merge.
		out[i] = wire.Message{Kind: wire.KindGift, User: fmt.Sprintf("%s-%d", tag, i), Gift: "rose", Value: 1}
	}
	return out
}

// TestCarryCountsAgainstMaxPending: gifts carried count against maxPending
// with those pending, so a flood stops the reading instead of growing the
// carry without limit; the slots go on by the clock meanwhile, each taking
// its budget out of the carry, and the entries left unread in a slot
// written that way come in later as late messages. Every gift reaches
// exactly one segment.
func TestCarryCountsAgainstMaxPending(t *testing.T) {
	const total = 5000
	r := newRig(t, Config{Budget: 200})
	r.s.maxPending = 100
	s0 := r.st.next
	r.at(s0, 100)
	var ids []string
	for _, m := range r.append(stream.Live, flood(total, "f")...) {
		ids = append(ids, m.ID)
	}
	// Reading stops once what is held reaches maxPending: at most a
	// batch per lane past it.
	limit := r.s.maxPending + 2*readBatch
	stopped := false
	for sec := s0 + 1; ; sec++ {
		if sec > s0+total {
			t.Fatalf("%d slots later, still %d held", total, r.st.holding())
		}
		r.at(sec, 10)
		r.turn()
		if h := r.st.holding(); h > limit {
			t.Fatalf("second %d: holds %d messages (%d carried), over %d", sec, h, len(r.st.carry), limit)
		}
		if r.st.holding() >= r.s.maxPending {
			stopped = true
			if want := float64(r.st.holding()) / giftRate(*r.s.budget.Load()); r.s.giftBacklog(r.st) != want {
				t.Fatalf("stopped, backlog %v, want all held (%v)", r.s.giftBacklog(r.st), want)
			}
		}
		if r.st.holding() == 0 && sec > s0+total/200 {
			break
		}
	}
	if !stopped {
		t.Fatal("reading never stopped at maxPending")
	}
	checkOnce(t, r.inSegments(s0), ids)
}

// TestBacklogPublishedAndLapses: the leader publishes the gifts it holds,
// in seconds of the budget gifts can use, and 0 once they are out; a value
// not renewed lapses after backlogTTL (a dead leader's).
func TestBacklogPublishedAndLapses(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{Budget: 10})
	rate := giftRate(*r.s.budget.Load()) // 9: all but the system share
	backlog := r.s.cfg.Backlog
	get := func() float64 {
		t.Helper()
		v, err := backlog.Get(ctx, room)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	s0 := r.st.next
	r.at(s0, 100)
	r.append(stream.Live, flood(46, "g")...)
	r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, User: "v", Text: "not a gift"})
	r.at(s0+1, 10)
	r.turn() // s0 written: 10 of the 46 out, 36 carried
	if len(r.st.carry) != 36 {
		t.Fatalf("carried %d, want 36", len(r.st.carry))
	}
	if v, want := get(), 36/rate; math.Abs(v-want) > 0.001 {
		t.Fatalf("published %v, want %v", v, want)
	}
	if r.s.maxBacklog() != 36/rate {
		t.Fatalf("gauge %v, want %v", r.s.maxBacklog(), 36/rate)
	}
	// The value lapses unless renewed.
	r.clk.Advance(backlogTTL)
	if v := get(); v != 0 {
		t.Fatalf("after the TTL: %v, want 0", v)
	}
	// Renewed each turn until the carry is out, then 0.
	for sec := s0 + 2; len(r.st.carry) > 0; sec++ {
		r.at(sec, 10)
		r.turn()
		if v, want := get(), float64(len(r.st.carry))/rate; math.Abs(v-want) > 0.001 {
			t.Fatalf("second %d: published %v, want %v", sec, v, want)
		}
	}
	if r.st.backlogShown || r.s.maxBacklog() != 0 {
		t.Fatalf("nothing held, yet shown %v, gauge %v", r.st.backlogShown, r.s.maxBacklog())
	}
	r.s.forgetBacklog(room)
}

// TestGiftFloodMemory floods a room with gifts through the gift log at ten
// times its budget, with a business server that retries every refused
// order after its Retry-After: the gift log refuses new orders once the
// published backlog is over the bound, the carry stays bounded, and every
// accepted gift reaches exactly one segment (each order once).
func TestGiftFloodMemory(t *testing.T) {
	const (
		budget   = 10
		perSec   = 10 * budget
		seconds  = 20
		boundSec = 3.0
	)
	ctx := context.Background()
	r := newRig(t, Config{Budget: budget})
	gifts, err := ingest.NewMemoryGiftLog(ingest.MemoryGiftLogConfig{
		Streams: r.streams, Clock: r.clk, Backlog: r.s.cfg.Backlog.(*MemoryBacklog),
		BacklogBound: func(string) float64 { return boundSec },
	})
	if err != nil {
		t.Fatal(err)
	}
	type order struct {
		id      string
		retryAt time.Time
	}
	var (
		waiting  []order // refused, to retry
		accepted = map[string]string{}
		ids      []string
		refused  int
		maxCarry int
	)
	s0 := r.st.next
	for sec := s0; ; sec++ {
		if sec > s0+100*seconds {
			t.Fatalf("%d s later, %d orders still refused, %d held", sec-s0, len(waiting), r.st.holding())
		}
		r.at(sec, 500)
		now := r.clk.Now()
		var offer []order
		if sec < s0+seconds {
			for i := range perSec {
				offer = append(offer, order{id: fmt.Sprintf("o%d-%d", sec-s0, i)})
			}
		}
		var later []order
		for _, o := range waiting {
			if now.Before(o.retryAt) {
				later = append(later, o)
			} else {
				offer = append(offer, o)
			}
		}
		waiting = later
		for _, o := range offer {
			m := wire.Message{Kind: wire.KindGift, User: o.id, Gift: "rose", Value: 1}
			id, dup, err := gifts.AppendGift(ctx, room, o.id, m)
			var be *ingest.GiftBacklogError
			switch {
			case errors.As(err, &be):
				if be.Backlog <= boundSec || be.RetryAfter < time.Second {
					t.Fatalf("refused at backlog %v (bound %v), retry after %v", be.Backlog, boundSec, be.RetryAfter)
				}
				refused++
				o.retryAt = now.Add(be.RetryAfter)
				waiting = append(waiting, o)
			case err != nil:
				t.Fatal(err)
			case dup:
				t.Fatalf("order %s answered as a repeat on its first acceptance", o.id)
			default:
				accepted[o.id] = id
				ids = append(ids, id)
			}
		}
		// A repeat of an accepted order gets its answer, backlog or not.
		if sec == s0+seconds/2 {
			for o, want := range accepted {
				id, dup, err := gifts.AppendGift(ctx, room, o, wire.Message{Kind: wire.KindGift, User: o, Gift: "rose", Value: 1})
				if err != nil || !dup || id != want {
					t.Fatalf("repeat of %s = %s, %v, %v; want %s", o, id, dup, err, want)
				}
				break
			}
		}
		r.at(sec+1, 10)
		r.turn()
		maxCarry = max(maxCarry, len(r.st.carry))
		if sec >= s0+seconds && len(waiting) == 0 && r.st.holding() == 0 {
			break
		}
	}
	if refused == 0 {
		t.Fatal("no gift was refused")
	}
	// Gifts are accepted while the backlog — published at the last slot,
	// plus what was accepted since — is within the bound, so the carry
	// reaches at most the bound's worth plus one gift, plus one second of
	// new orders once: those accepted before the first publication.
	if limit := int(boundSec*giftRate(*r.s.budget.Load())) + 1 + perSec; maxCarry > limit {
		t.Fatalf("carry reached %d, over %d", maxCarry, limit)
	}
	if len(ids) != seconds*perSec {
		t.Fatalf("%d orders accepted, want all %d in the end", len(ids), seconds*perSec)
	}
	checkOnce(t, r.inSegments(s0), ids)
	t.Logf("%d gifts offered over %d s at %d/s (budget %d/s, bound %v s): %d refusals, the carry at most %d; each gift in exactly one segment",
		seconds*perSec, seconds, perSec, budget, boundSec, refused, maxCarry)
}
