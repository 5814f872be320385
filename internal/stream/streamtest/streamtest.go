// Package streamtest is the conformance suite every stream.Store
// implementation runs: the in-memory store in its package's tests, the Redis
// store against a real Redis server. It pins down the Redis Streams semantics
// the slicer and the edge rely on: ids that only grow, consumer groups that
// deliver each entry once per group, pending entries that a new leader can
// claim, trimming, fan-out reads and blocking reads that wake on an append
// and on context cancellation.
//
// # Time
//
// Run passes newStore a fake clock. A store may stamp ids with it (the memory
// store does) or ignore it (a Redis store stamps ids with Redis's clock, which
// no test can set). The suite finds out which by comparing the store's Now
// with the fake clock once per subtest, and it is written so that both pass:
//
//   - id times are only checked against the store's own Now, read before and
//     after an append, and against each other (relative order);
//   - where idle time must pass (Claim's minIdle), the suite advances the fake
//     clock and, for a store on a real clock, polls with a small minIdle until
//     the entries qualify (bounded by a generous deadline, never asserted);
//   - what only a controllable clock can show (several appends inside one
//     millisecond, a clock that steps back) is checked only when the store
//     follows the fake clock.
//
// Blocking reads use real time, as Redis's BLOCK does: short blocks where a
// read must come back empty, long ones (seconds) where it must be woken, with
// no assertion on how long anything took.
//
// Run calls newStore once per subtest; newStore must return an empty store
// (for a shared server: a flushed database or a fresh key prefix) and register
// its own cleanup with t.Cleanup.
package streamtest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// fakeStart is where the fake clock starts: far from any real time, so that a
// store following it is told apart from one on a real clock.
var fakeStart = time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC)

const (
	// wakeBlock is the block of reads that an append or a cancellation must
	// wake; it is long so that only a missed wake-up reaches it.
	wakeBlock = 20 * time.Second
	// guard bounds every wait on a goroutine, so a broken store fails the test
	// instead of hanging it.
	guard = 30 * time.Second
	// shortBlock is the block of reads that must come back empty.
	shortBlock = 20 * time.Millisecond
	// minIdle is Claim's idle threshold. On a real clock the suite waits for
	// it to pass, and also relies on two consecutive calls being closer than
	// it, so it is long enough for a loaded CI machine under -race.
	minIdle = 250 * time.Millisecond
)

// Run runs the suite. See the package documentation for how the clock is used.
func Run(t *testing.T, newStore func(t *testing.T, clk *clock.Fake) stream.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(e *env)
	}{
		{"AppendAssignsIDs", testAppendAssignsIDs},
		{"AppendEmpty", testAppendEmpty},
		{"SameMillisecondSeq", testSameMillisecond},
		{"ClockStepsBack", testClockStepsBack},
		{"ConcurrentAppend", testConcurrentAppend},
		{"KeysAreIndependent", testKeysIndependent},
		{"CallerOwnsEntries", testCallerOwnsEntries},
		{"ReadGroupOncePerGroup", testReadGroupOncePerGroup},
		{"ReadGroupCount", testReadGroupCount},
		{"ReadGroupBlockWakes", testReadGroupBlockWakes},
		{"ReadGroupBlockTimesOut", testReadGroupBlockTimesOut},
		{"ClaimIdle", testClaimIdle},
		{"AckRemovesPending", testAckRemovesPending},
		{"PendingFloor", testPendingFloor},
		{"TrimBefore", testTrimBefore},
		{"DropGroup", testDropGroup},
		{"ReadAfterID", testReadAfterID},
		{"ReadAfterDollar", testReadAfterDollar},
		{"ReadBlockWakes", testReadBlockWakes},
		{"ReadBlockTimesOut", testReadBlockTimesOut},
		{"MalformedIDs", testMalformedIDs},
		{"LastID", testLastID},
		{"Rooms", testRooms},
		{"CancelUnblocksRead", testCancelUnblocks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(fakeStart)
			s := newStore(t, clk)
			e := &env{t: t, s: s, clk: clk, ctx: context.Background()}
			now, err := s.Now(e.ctx)
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			e.fake = now.Equal(clk.Now())
			tt.fn(e)
		})
	}
}

// env is one subtest's store and clock.
type env struct {
	t    *testing.T
	s    stream.Store
	clk  *clock.Fake
	fake bool // the store stamps ids and idle times with clk
	ctx  context.Context
}

var (
	keyB = stream.Key{Room: "room1", Lane: stream.Barrage}
	keyL = stream.Key{Room: "room1", Lane: stream.Live}
)

// sample returns n messages with every kind of field set, ids left bogus (the
// store must replace them).
func sample(n int) []wire.Message {
	out := make([]wire.Message, n)
	for i := range out {
		is := strconv.Itoa(i)
		switch i % 3 {
		case 0:
			out[i] = wire.Message{ID: "bogus", Kind: wire.KindBarrage, User: "u" + is, Nick: "观众" + is, Avatar: "a" + is, Text: "弹幕内容 " + is}
		case 1:
			out[i] = wire.Message{Kind: wire.KindGift, User: "u" + is, Nick: "土豪", Gift: "rocket", Value: 50000, Count: 3,
				Merged: []string{"1-0", "2-" + is}, Order: "order-" + is}
		case 2:
			out[i] = wire.Message{ID: "9-9", Kind: wire.KindSystem, Text: "公告 " + is, Role: "host", Offset: 12}
		}
	}
	return out
}

func (e *env) append(key stream.Key, msgs []wire.Message) []wire.Message {
	e.t.Helper()
	out, err := e.s.Append(e.ctx, key, msgs)
	if err != nil {
		e.t.Fatalf("Append: %v", err)
	}
	if len(out) != len(msgs) {
		e.t.Fatalf("Append returned %d messages for %d", len(out), len(msgs))
	}
	return out
}

func (e *env) now() time.Time {
	e.t.Helper()
	n, err := e.s.Now(e.ctx)
	if err != nil {
		e.t.Fatalf("Now: %v", err)
	}
	return n
}

func (e *env) read(key stream.Key, after string, count int) []stream.Entry {
	e.t.Helper()
	got, err := e.s.Read(e.ctx, key, after, count, 0)
	if err != nil {
		e.t.Fatalf("Read(after %q): %v", after, err)
	}
	return got
}

func (e *env) readGroup(key stream.Key, group, consumer string, count int) []stream.Entry {
	e.t.Helper()
	got, err := e.s.ReadGroup(e.ctx, key, group, consumer, count, 0)
	if err != nil {
		e.t.Fatalf("ReadGroup(%s, %s): %v", group, consumer, err)
	}
	return got
}

func (e *env) ack(key stream.Key, group string, ids ...string) {
	e.t.Helper()
	if err := e.s.Ack(e.ctx, key, group, ids...); err != nil {
		e.t.Fatalf("Ack: %v", err)
	}
}

func (e *env) claim(key stream.Key, group, consumer string, idle time.Duration, count int) []stream.Entry {
	e.t.Helper()
	got, err := e.s.Claim(e.ctx, key, group, consumer, idle, count)
	if err != nil {
		e.t.Fatalf("Claim(%s, %s, %v): %v", group, consumer, idle, err)
	}
	return got
}

// claimIdle claims, for consumer, the entries that become idle for minIdle:
// at once after advancing the fake clock, or by polling on a real clock until
// want entries were claimed. It returns the ids claimed.
func (e *env) claimIdle(key stream.Key, group, consumer string, want int) []string {
	e.t.Helper()
	var ids []string
	if e.fake {
		e.clk.Advance(2 * minIdle)
		return idsOf(e.claim(key, group, consumer, minIdle, 0))
	}
	deadline := time.Now().Add(guard)
	for len(ids) < want && time.Now().Before(deadline) {
		ids = append(ids, idsOf(e.claim(key, group, consumer, minIdle, 0))...)
		if len(ids) < want {
			time.Sleep(minIdle / 5)
		}
	}
	slices.SortFunc(ids, wire.CompareIDs)
	return ids
}

// idle lets minIdle pass for the store (a no-op when nothing must pass).
func (e *env) idle() {
	if e.fake {
		e.clk.Advance(2 * minIdle)
		return
	}
	time.Sleep(2 * minIdle)
}

func idsOf(es []stream.Entry) []string {
	out := make([]string, len(es))
	for i := range es {
		out[i] = es[i].ID
	}
	return out
}

// sameMessage compares two messages treating a nil and an empty Merged alike.
func sameMessage(a, b wire.Message) bool {
	if len(a.Merged) == 0 {
		a.Merged = nil
	}
	if len(b.Merged) == 0 {
		b.Merged = nil
	}
	return reflect.DeepEqual(a, b)
}

func (e *env) expectEntries(what string, got, want []stream.Entry) {
	e.t.Helper()
	if len(got) != len(want) {
		e.t.Fatalf("%s: got ids %v, want %v", what, idsOf(got), idsOf(want))
	}
	for i := range got {
		if !sameMessage(got[i], want[i]) {
			e.t.Fatalf("%s: entry %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func (e *env) expectIDs(what string, got []string, want ...string) {
	e.t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("%s: got ids %v, want %v", what, got, want)
	}
}

// checkIDSequence checks that consecutive ids grow as Redis stream ids do:
// within one millisecond the sequence counts up by one, a later millisecond
// starts again at 0. It returns how many pairs shared a millisecond.
func checkIDSequence(t *testing.T, ids []string) (sameMs int) {
	t.Helper()
	var pms int64
	var pseq uint64
	for i, id := range ids {
		ms, seq, err := wire.ParseID(id)
		if err != nil {
			t.Fatalf("id %d %q: %v", i, id, err)
		}
		if i > 0 {
			switch {
			case ms == pms && seq != pseq+1:
				t.Fatalf("ids %s then %s: same millisecond, seq must count up by one", ids[i-1], id)
			case ms == pms:
				sameMs++
			case ms < pms:
				t.Fatalf("ids %s then %s go backwards", ids[i-1], id)
			case seq != 0:
				t.Fatalf("ids %s then %s: a new millisecond must start at seq 0", ids[i-1], id)
			}
		}
		pms, pseq = ms, seq
	}
	return sameMs
}

func testAppendAssignsIDs(e *env) {
	in := sample(6)
	before := e.now()
	out := e.append(keyL, in)
	after := e.now()
	checkIDSequence(e.t, idsOf(out))
	for i := range out {
		ms, _, err := wire.ParseID(out[i].ID)
		if err != nil {
			e.t.Fatalf("Append assigned malformed id %q", out[i].ID)
		}
		if ms < before.UnixMilli() || ms > after.UnixMilli() {
			e.t.Errorf("id %s is outside the store's clock [%d, %d] around the append", out[i].ID, before.UnixMilli(), after.UnixMilli())
		}
		want := in[i]
		want.ID = out[i].ID
		if !sameMessage(out[i], want) {
			e.t.Errorf("Append changed message %d:\n got %+v\nwant %+v", i, out[i], want)
		}
	}
	if in[0].ID != "bogus" {
		e.t.Error("Append modified the caller's messages")
	}
	// Every field survives storage, the order id included: it is kept in the
	// stream for audit, even though segments leave it out.
	e.expectEntries("Read after Append", e.read(keyL, "0", 0), out)

	more := e.append(keyL, sample(2))
	if wire.CompareIDs(more[0].ID, out[len(out)-1].ID) <= 0 {
		e.t.Fatalf("second batch id %s not after first batch's %s", more[0].ID, out[len(out)-1].ID)
	}
	checkIDSequence(e.t, idsOf(e.read(keyL, "0", 0)))
}

func testAppendEmpty(e *env) {
	out, err := e.s.Append(e.ctx, keyB, nil)
	if err != nil || len(out) != 0 {
		e.t.Fatalf("Append(nil) = %v, %v", out, err)
	}
	if got := e.read(keyB, "0", 0); len(got) != 0 {
		e.t.Fatalf("empty append stored %v", idsOf(got))
	}
}

func testSameMillisecond(e *env) {
	if !e.fake {
		// On a real clock, a batch usually lands within one millisecond;
		// whatever happens, the ids must follow the Redis rule.
		out := e.append(keyB, sample(100))
		n := checkIDSequence(e.t, idsOf(out))
		e.t.Logf("store on its own clock: %d of 99 consecutive ids shared a millisecond", n)
		return
	}
	var ids []string
	for range 3 { // separate appends inside one millisecond
		ids = append(ids, e.append(keyB, sample(1))[0].ID)
	}
	ids = append(ids, idsOf(e.append(keyB, sample(2)))...)
	e.clk.Advance(time.Millisecond)
	ids = append(ids, e.append(keyB, sample(1))[0].ID)
	ms := fakeStart.UnixMilli()
	e.expectIDs("ids", ids,
		wire.FormatID(ms, 0), wire.FormatID(ms, 1), wire.FormatID(ms, 2), wire.FormatID(ms, 3), wire.FormatID(ms, 4),
		wire.FormatID(ms+1, 0))
	checkIDSequence(e.t, ids)
}

func testClockStepsBack(e *env) {
	if !e.fake {
		e.t.Skip("the store does not follow the fake clock; only a controllable clock can step back")
	}
	first := e.append(keyB, sample(1))[0].ID
	e.clk.Advance(-time.Second)
	second := e.append(keyB, sample(1))[0].ID
	if wire.CompareIDs(second, first) <= 0 {
		e.t.Fatalf("after the clock stepped back, id %s is not after %s", second, first)
	}
	checkIDSequence(e.t, []string{first, second})
}

func testConcurrentAppend(e *env) {
	const writers, each = 8, 20
	got := make([][]string, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for range each {
				out, err := e.s.Append(e.ctx, keyB, sample(1))
				if err != nil {
					e.t.Errorf("Append: %v", err)
					return
				}
				got[w] = append(got[w], out[0].ID)
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for w := range got {
		for i, id := range got[w] {
			if seen[id] {
				e.t.Fatalf("id %s assigned twice", id)
			}
			seen[id] = true
			if i > 0 && wire.CompareIDs(got[w][i-1], id) >= 0 {
				e.t.Fatalf("writer %d: id %s not after its previous %s", w, id, got[w][i-1])
			}
		}
	}
	all := idsOf(e.read(keyB, "0", 0))
	if len(all) != writers*each {
		e.t.Fatalf("Read returned %d entries, want %d", len(all), writers*each)
	}
	checkIDSequence(e.t, all)
	for _, id := range all {
		if !seen[id] {
			e.t.Fatalf("Read returned id %s no Append returned", id)
		}
	}
}

func testKeysIndependent(e *env) {
	other := stream.Key{Room: "room2", Lane: stream.Barrage}
	b := e.append(keyB, sample(2))
	l := e.append(keyL, sample(3))
	o := e.append(other, sample(1))
	e.expectEntries("barrage lane", e.read(keyB, "0", 0), b)
	e.expectEntries("live lane", e.read(keyL, "0", 0), l)
	e.expectEntries("other room", e.read(other, "0", 0), o)
	e.expectEntries("group on live lane", e.readGroup(keyL, "g", "c", 0), l)
	e.expectEntries("same group name on barrage lane", e.readGroup(keyB, "g", "c", 0), b)
}

// testCallerOwnsEntries: what a caller passes to Append and what any read
// returns are the caller's, as with a store that goes over the network; the
// slicer merges gifts by extending Merged in place.
func testCallerOwnsEntries(e *env) {
	in := []wire.Message{{Kind: wire.KindGift, User: "u1", Gift: "rocket", Merged: make([]string, 2, 8)}}
	in[0].Merged[0], in[0].Merged[1] = "1-0", "2-0"
	out := e.append(keyL, in)
	want := out[0]
	want.Merged = []string{"1-0", "2-0"}
	in[0].Merged[0] = "changed-after-append"
	_ = append(in[0].Merged[:1], "appended-after-append")
	got := e.read(keyL, "0", 0)
	e.expectEntries("after the caller reused its input", got, []stream.Entry{want})

	for _, es := range [][]stream.Entry{out, got, e.readGroup(keyL, "g", "c", 0)} {
		es[0].Merged[0] = "scribbled"
		_ = append(es[0].Merged[:1], "scribbled too")
	}
	e.idle()
	claimed := e.claim(keyL, "g", "c2", minIdle, 0)
	e.expectEntries("Claim after readers scribbled", claimed, []stream.Entry{want})
	claimed[0].Merged[0] = "scribbled"
	e.expectEntries("Read after readers scribbled", e.read(keyL, "0", 0), []stream.Entry{want})
}

func testReadGroupOncePerGroup(e *env) {
	first := e.append(keyL, sample(3))
	e.expectEntries("g1 first read", e.readGroup(keyL, "g1", "c1", 10), first)
	e.expectIDs("g1 second read", idsOf(e.readGroup(keyL, "g1", "c1", 10)))
	e.expectIDs("g1 other consumer", idsOf(e.readGroup(keyL, "g1", "c2", 10)))
	e.expectEntries("g2 sees all", e.readGroup(keyL, "g2", "c1", 10), first)

	second := e.append(keyL, sample(2))
	e.expectEntries("g1 after more appends", e.readGroup(keyL, "g1", "c2", 10), second)
	e.expectEntries("g2 after more appends", e.readGroup(keyL, "g2", "c9", 10), second)
	// A new group starts at the beginning of the stream.
	e.expectEntries("new group", e.readGroup(keyL, "g3", "c1", 10), append(slices.Clone(first), second...))
}

func testReadGroupCount(e *env) {
	all := e.append(keyB, sample(5))
	e.expectEntries("count 2", e.readGroup(keyB, "g", "c", 2), all[:2])
	e.expectEntries("next 2", e.readGroup(keyB, "g", "c", 2), all[2:4])
	e.expectEntries("rest", e.readGroup(keyB, "g", "c", 2), all[4:])
	e.expectIDs("nothing left", idsOf(e.readGroup(keyB, "g", "c", 2)))
}

type result struct {
	entries []stream.Entry
	err     error
}

func (e *env) await(what string, ch <-chan result) result {
	e.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(guard):
		e.t.Fatalf("%s: the blocked read never returned", what)
		return result{}
	}
}

func testReadGroupBlockWakes(e *env) {
	// The group exists and has consumed everything before the read blocks.
	first := e.append(keyL, sample(1))
	e.expectEntries("drain", e.readGroup(keyL, "g", "c", 0), first)
	ch := make(chan result, 1)
	go func() {
		es, err := e.s.ReadGroup(e.ctx, keyL, "g", "c", 10, wakeBlock)
		ch <- result{es, err}
	}()
	time.Sleep(shortBlock) // let the reader block; correctness does not depend on it
	want := e.append(keyL, sample(1))
	r := e.await("ReadGroup", ch)
	if r.err != nil {
		e.t.Fatalf("blocked ReadGroup: %v", r.err)
	}
	e.expectEntries("blocked ReadGroup", r.entries, want)
}

func testReadGroupBlockTimesOut(e *env) {
	got, err := e.s.ReadGroup(e.ctx, keyL, "g", "c", 10, shortBlock)
	if err != nil || len(got) != 0 {
		e.t.Fatalf("ReadGroup on an empty stream = %v, %v; want nothing, nil", idsOf(got), err)
	}
	e.append(keyL, sample(1))
	e.readGroup(keyL, "g", "c", 0)
	got, err = e.s.ReadGroup(e.ctx, keyL, "g", "c", 10, shortBlock)
	if err != nil || len(got) != 0 {
		e.t.Fatalf("ReadGroup with nothing new = %v, %v; want nothing, nil", idsOf(got), err)
	}
}

func testClaimIdle(e *env) {
	all := e.append(keyL, sample(3))
	e.expectEntries("c1 reads", e.readGroup(keyL, "g", "c1", 0), all)
	// Nothing has been pending for an hour.
	e.expectIDs("claim before idle", idsOf(e.claim(keyL, "g", "c2", time.Hour, 0)))
	// c1 finished the middle one, then died holding the others.
	e.ack(keyL, "g", all[1].ID)
	e.expectIDs("c2 claims idle entries", e.claimIdle(keyL, "g", "c2", 2), all[0].ID, all[2].ID)
	// Claiming restarts their idle time: nothing is idle for an hour now.
	e.expectIDs("claim right after a claim", idsOf(e.claim(keyL, "g", "c3", time.Hour, 0)))
	// c2 died too: c3 takes them over, one at a time if it asks so.
	if e.fake {
		e.clk.Advance(2 * minIdle)
	} else {
		time.Sleep(2 * minIdle)
	}
	one := e.claim(keyL, "g", "c3", minIdle, 1)
	e.expectEntries("claim with count 1", one, all[:1])
	// The one just claimed is not idle; the other still is.
	e.expectIDs("c3 claims the rest", idsOf(e.claim(keyL, "g", "c3", minIdle, 0)), all[2].ID)
	// Claim returns whole entries.
	e.ack(keyL, "g", all[0].ID)
	if e.fake {
		e.clk.Advance(2 * minIdle)
	} else {
		time.Sleep(2 * minIdle)
	}
	e.expectEntries("claimed entry", e.claim(keyL, "g", "c4", minIdle, 0), all[2:])
	// Claims in another group or of an unknown group see nothing.
	e.expectIDs("unknown group", idsOf(e.claim(keyL, "nobody", "c4", 0, 0)))
}

func testAckRemovesPending(e *env) {
	all := e.append(keyB, sample(4))
	e.readGroup(keyB, "g", "c1", 0)
	e.readGroup(keyB, "other", "c1", 0)
	e.ack(keyB, "g", all[0].ID, all[1].ID, all[2].ID, all[3].ID)
	// Acking again, acking unknown ids or in an unknown group is harmless.
	e.ack(keyB, "g", all[0].ID, "99999999999999-0")
	e.ack(keyB, "nogroup", all[0].ID)
	e.idle()
	e.expectIDs("claim after ack", idsOf(e.claim(keyB, "g", "c2", minIdle, 0)))
	// Acks are per group: the other group still holds all four.
	e.expectIDs("other group", e.claimIdle(keyB, "other", "c2", 4), idsOf(all)...)
}

func testDropGroup(e *env) {
	all := e.append(keyB, sample(3))
	e.readGroup(keyB, "room-a", "c", 0) // all three pending in room-a
	e.readGroup(keyB, "room-b", "c", 0)
	if err := e.s.DropGroup(e.ctx, keyB, "room-a"); err != nil {
		e.t.Fatalf("DropGroup: %v", err)
	}
	if _, ok, err := e.s.PendingFloor(e.ctx, keyB, "room-b"); err != nil || !ok {
		e.t.Fatalf("the other group lost its pending entries: %v, %v", ok, err)
	}
	// Gone with its pending entries: read again, it starts afresh.
	e.expectEntries("a dropped group read again", e.readGroup(keyB, "room-a", "c", 0), all)
	for _, tc := range []struct {
		key   stream.Key
		group string
	}{{keyB, "never-made"}, {stream.Key{Room: "missing"}, "g"}} {
		if err := e.s.DropGroup(e.ctx, tc.key, tc.group); err != nil {
			e.t.Fatalf("DropGroup(%v, %s) of nothing: %v", tc.key, tc.group, err)
		}
	}
}

func testTrimBefore(e *env) {
	all := e.append(keyB, sample(5))
	e.readGroup(keyB, "old", "c", 0)
	if err := e.s.TrimBefore(e.ctx, keyB, all[2].ID); err != nil {
		e.t.Fatalf("TrimBefore: %v", err)
	}
	// The entry at minID stays (XTRIM MINID keeps ids ≥ minID).
	e.expectEntries("Read after trim", e.read(keyB, "0", 0), all[2:])
	e.expectEntries("new group after trim", e.readGroup(keyB, "new", "c", 0), all[2:])
	if got, err := e.s.LastID(e.ctx, keyB); err != nil || got != all[4].ID {
		e.t.Fatalf("LastID after trim = %q, %v; want %q", got, err, all[4].ID)
	}
	// Trimming everything does not restart the ids.
	if err := e.s.TrimBefore(e.ctx, keyB, wire.FormatID(1<<62, 0)); err != nil {
		e.t.Fatalf("TrimBefore everything: %v", err)
	}
	e.expectIDs("Read after trimming all", idsOf(e.read(keyB, "0", 0)))
	next := e.append(keyB, sample(1))
	if wire.CompareIDs(next[0].ID, all[4].ID) <= 0 {
		e.t.Fatalf("id after trimming all %s is not after %s", next[0].ID, all[4].ID)
	}
	// Trimming an empty or missing stream is fine.
	if err := e.s.TrimBefore(e.ctx, stream.Key{Room: "empty"}, all[0].ID); err != nil {
		e.t.Fatalf("TrimBefore on a missing stream: %v", err)
	}
}

func testReadAfterID(e *env) {
	all := e.append(keyL, sample(5))
	e.expectEntries(`after ""`, e.read(keyL, "", 0), all)
	e.expectEntries(`after "0"`, e.read(keyL, "0", 0), all)
	e.expectEntries(`after "0-0"`, e.read(keyL, "0-0", 0), all)
	e.expectEntries("after the second", e.read(keyL, all[1].ID, 0), all[2:])
	e.expectEntries("after the second, count 2", e.read(keyL, all[1].ID, 2), all[2:4])
	e.expectIDs("after the last", idsOf(e.read(keyL, all[4].ID, 0)))
	// An id that is not itself an entry: just below the first one.
	ms, seq, _ := wire.ParseID(all[0].ID)
	below := wire.FormatID(ms-1, 1<<62)
	if seq > 0 {
		below = wire.FormatID(ms, seq-1)
	}
	e.expectEntries("after an id below the first", e.read(keyL, below, 0), all)
	// Reading keeps no state.
	e.expectEntries("again from the start", e.read(keyL, "0", 0), all)
}

func testReadAfterDollar(e *env) {
	old := e.append(keyL, sample(2))
	e.expectIDs(`after "$" without block`, idsOf(e.read(keyL, "$", 0)))

	ch := make(chan result, 1)
	go func() {
		es, err := e.s.Read(e.ctx, keyL, "$", 10, wakeBlock)
		ch <- result{es, err}
	}()
	// The reader resolves "$" at some point we cannot see; appending until it
	// returns makes sure something is appended after that point.
	appended := map[string]bool{}
	var r result
	deadline := time.After(guard)
wait:
	for {
		for _, m := range e.append(keyL, sample(1)) {
			appended[m.ID] = true
		}
		select {
		case r = <-ch:
			break wait
		case <-time.After(shortBlock):
		case <-deadline:
			e.t.Fatal(`Read after "$" never returned`)
		}
	}
	if r.err != nil {
		e.t.Fatalf(`blocked Read after "$": %v`, r.err)
	}
	if len(r.entries) == 0 {
		e.t.Fatal(`blocked Read after "$" returned nothing`)
	}
	for _, m := range r.entries {
		if !appended[m.ID] {
			e.t.Fatalf(`Read after "$" returned %s, which was there before (old: %v)`, m.ID, idsOf(old))
		}
	}
	checkIDSequence(e.t, idsOf(r.entries))
}

func testReadBlockWakes(e *env) {
	last := e.append(keyB, sample(1))[0].ID
	ch := make(chan result, 1)
	go func() {
		es, err := e.s.Read(e.ctx, keyB, last, 10, wakeBlock)
		ch <- result{es, err}
	}()
	time.Sleep(shortBlock)
	want := e.append(keyB, sample(1))
	r := e.await("Read", ch)
	if r.err != nil {
		e.t.Fatalf("blocked Read: %v", r.err)
	}
	e.expectEntries("blocked Read", r.entries, want)
}

func testReadBlockTimesOut(e *env) {
	got, err := e.s.Read(e.ctx, keyB, "0", 10, shortBlock)
	if err != nil || len(got) != 0 {
		e.t.Fatalf("Read on an empty stream = %v, %v; want nothing, nil", idsOf(got), err)
	}
	last := e.append(keyB, sample(1))[0].ID
	got, err = e.s.Read(e.ctx, keyB, last, 10, shortBlock)
	if err != nil || len(got) != 0 {
		e.t.Fatalf("Read after the last id = %v, %v; want nothing, nil", idsOf(got), err)
	}
	got, err = e.s.Read(e.ctx, keyB, "$", 10, shortBlock)
	if err != nil || len(got) != 0 {
		e.t.Fatalf(`Read after "$" = %v, %v; want nothing, nil`, idsOf(got), err)
	}
}

func testMalformedIDs(e *env) {
	e.append(keyB, sample(1))
	for _, id := range []string{"abc", "1-x", "x-1", "-1", "1-2-3", "1.5-0", "$$"} {
		if got, err := e.s.Read(e.ctx, keyB, id, 0, 0); !errors.Is(err, stream.ErrBadID) {
			e.t.Errorf("Read(after %q) = %v, %v; want ErrBadID", id, idsOf(got), err)
		}
		if err := e.s.TrimBefore(e.ctx, keyB, id); !errors.Is(err, stream.ErrBadID) {
			e.t.Errorf("TrimBefore(%q) = %v; want ErrBadID", id, err)
		}
	}
	if got := e.read(keyB, "0", 0); len(got) != 1 {
		e.t.Fatalf("a rejected trim removed entries: %v", idsOf(got))
	}
}

func testLastID(e *env) {
	if got, err := e.s.LastID(e.ctx, keyB); err != nil || got != "0-0" {
		e.t.Fatalf("LastID of an empty stream = %q, %v; want 0-0", got, err)
	}
	all := e.append(keyB, sample(3))
	if got, err := e.s.LastID(e.ctx, keyB); err != nil || got != all[2].ID {
		e.t.Fatalf("LastID = %q, %v; want %q", got, err, all[2].ID)
	}
	if got, err := e.s.LastID(e.ctx, keyL); err != nil || got != "0-0" {
		e.t.Fatalf("LastID of the other lane = %q, %v; want 0-0", got, err)
	}
}

func testRooms(e *env) {
	type span struct{ before, after time.Time }
	spans := map[string]span{}
	open := func(room string, do func()) {
		before := e.now()
		do()
		spans[room] = span{before, e.now()}
	}
	open("appended", func() { e.append(stream.Key{Room: "appended", Lane: stream.Barrage}, sample(1)) })
	open("live-only", func() { e.append(stream.Key{Room: "live-only", Lane: stream.Live}, sample(1)) })
	open("opened", func() {
		if err := e.s.OpenRoom(e.ctx, "opened"); err != nil {
			e.t.Fatalf("OpenRoom: %v", err)
		}
	})
	// Opening again, or appending later, keeps the first open time.
	if e.fake {
		e.clk.Advance(10 * time.Second)
	}
	if err := e.s.OpenRoom(e.ctx, "opened"); err != nil {
		e.t.Fatalf("OpenRoom again: %v", err)
	}
	if err := e.s.OpenRoom(e.ctx, "appended"); err != nil {
		e.t.Fatalf("OpenRoom of an appended room: %v", err)
	}
	e.append(stream.Key{Room: "opened", Lane: stream.Live}, sample(1))
	// Reading a room does not register it: a client resuming in a made-up
	// room must not make the slicer write seconds for it.
	e.read(stream.Key{Room: "read-only"}, "0", 0)
	e.readGroup(stream.Key{Room: "read-only"}, "g", "c", 0)

	rooms, err := e.s.Rooms(e.ctx)
	if err != nil {
		e.t.Fatalf("Rooms: %v", err)
	}
	byID := map[string][]stream.Room{}
	for _, r := range rooms {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for id, sp := range spans {
		rs := byID[id]
		if len(rs) != 1 {
			e.t.Errorf("Rooms() = %v: %q listed %d times, want once", rooms, id, len(rs))
			continue
		}
		// Second precision is all a slicer needs from the open time.
		if o := rs[0].Opened.Unix(); o < sp.before.Unix() || o > sp.after.Unix() {
			e.t.Errorf("room %q Opened = %v, want the store's time of its first open, in [%v, %v]",
				id, rs[0].Opened, sp.before, sp.after)
		}
	}
	if len(byID["read-only"]) != 0 {
		e.t.Errorf("Rooms() = %v lists a room that was only read", rooms)
	}
}

func testCancelUnblocks(e *env) {
	e.append(keyL, sample(1))
	e.readGroup(keyL, "g", "c", 0)
	ctx, cancel := context.WithCancel(e.ctx)
	reads := map[string]func() error{
		"Read": func() error {
			_, err := e.s.Read(ctx, keyL, "$", 10, wakeBlock)
			return err
		},
		"ReadGroup": func() error {
			_, err := e.s.ReadGroup(ctx, keyL, "g", "c", 10, wakeBlock)
			return err
		},
	}
	done := make(map[string]chan error, len(reads))
	for name, read := range reads {
		ch := make(chan error, 1)
		done[name] = ch
		go func() { ch <- read() }()
	}
	time.Sleep(shortBlock)
	cancel()
	for name, ch := range done {
		select {
		case err := <-ch:
			if !errors.Is(err, context.Canceled) {
				e.t.Errorf("%s after cancel: err = %v, want context.Canceled", name, err)
			}
		case <-time.After(guard):
			e.t.Fatalf("%s: cancelling the context did not unblock it", name)
		}
	}
}

// testPendingFloor: the floor is the smallest unacknowledged delivered id,
// whichever consumer holds it; none before delivery and after every ack.
func testPendingFloor(e *env) {
	if _, ok, err := e.s.PendingFloor(e.ctx, keyL, "g"); err != nil || ok {
		e.t.Fatalf("PendingFloor with no group = %v, %v", ok, err)
	}
	in := e.append(keyL, sample(4))
	if _, ok, err := e.s.PendingFloor(e.ctx, keyL, "g"); err != nil || ok {
		e.t.Fatalf("PendingFloor before delivery = %v, %v", ok, err)
	}
	e.readGroup(keyL, "g", "a", 2)
	e.readGroup(keyL, "g", "b", 2)
	floor := func() string {
		id, ok, err := e.s.PendingFloor(e.ctx, keyL, "g")
		if err != nil {
			e.t.Fatalf("PendingFloor: %v", err)
		}
		if !ok {
			return ""
		}
		return id
	}
	if got := floor(); got != in[0].ID {
		e.t.Fatalf("floor = %q, want %q", got, in[0].ID)
	}
	e.ack(keyL, "g", in[0].ID, in[1].ID)
	if got := floor(); got != in[2].ID {
		e.t.Fatalf("after acking consumer a's: floor = %q, want consumer b's %q", got, in[2].ID)
	}
	e.ack(keyL, "g", in[2].ID, in[3].ID)
	if got := floor(); got != "" {
		e.t.Fatalf("after acking all: floor = %q", got)
	}
}
