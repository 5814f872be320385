package slicer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

type rig struct {
	t       *testing.T
	clk     *clock.Fake
	streams *stream.MemoryStore
	objects *objstore.MemoryStore
	s       *Slicer
	st      *roomState
}

const room = "r1"

func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := &rig{t: t, clk: clk, streams: stream.NewMemoryStore(clk), objects: objstore.NewMemoryStore()}
	cfg.Streams, cfg.Objects, cfg.Clock = r.streams, r.objects, clk
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	r.st, err = s.resume(context.Background(), room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// at moves the fake clock to ms milliseconds into second sec.
func (r *rig) at(sec int64, ms int64) { r.clk.Set(time.UnixMilli(sec*1000 + ms)) }

func (r *rig) append(lane stream.Lane, msgs ...wire.Message) []wire.Message {
	r.t.Helper()
	out, err := r.streams.Append(context.Background(), stream.Key{Room: room, Lane: lane}, msgs)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// flush reads and writes every due second, as one tick of lead does.
func (r *rig) flush() {
	r.t.Helper()
	ctx := context.Background()
	now := r.clk.Now()
	_, drained, err := r.s.read(ctx, r.st)
	if err != nil {
		r.t.Fatal(err)
	}
	if drained {
		r.st.readUpTo = now
	}
	for r.s.complete(r.st) {
		if err := r.s.writeSlot(ctx, r.st, now, now); err != nil {
			r.t.Fatal(err)
		}
	}
}

// putSegment writes second sec as a predecessor leader would have, holding
// msgs with sequence number seq.
func (r *rig) putSegment(sec int64, seq uint64, msgs ...wire.Message) {
	r.t.Helper()
	seg := &wire.Segment{V: wire.Version, Room: room, Second: sec, Seq: seq, Dur: wire.SegmentDuration}
	for _, m := range msgs {
		seg.Messages = append(seg.Messages, wire.Slim(m))
	}
	body, err := wire.EncodeSegment(seg)
	if err != nil {
		r.t.Fatal(err)
	}
	opts := objstore.PutOptions{IfNoneMatch: true, ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl}
	if _, err := r.objects.Put(context.Background(), wire.SegmentKey(room, sec), body, opts); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) segment(sec int64) *wire.Segment {
	r.t.Helper()
	obj, err := r.objects.Get(context.Background(), wire.SegmentKey(room, sec))
	if err != nil {
		r.t.Fatalf("segment %d: %v", sec, err)
	}
	if obj.CacheControl != wire.SegmentCacheControl || obj.ContentType != wire.SegmentContentType {
		r.t.Fatalf("segment headers %q %q", obj.CacheControl, obj.ContentType)
	}
	seg, err := wire.DecodeSegment(obj.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return seg
}

func (r *rig) manifest() *wire.Manifest {
	r.t.Helper()
	obj, err := r.objects.Get(context.Background(), wire.ManifestKey(room))
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := wire.DecodeManifest(obj.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

func TestEmptySecondsAreWrittenInSequence(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0, 999)
	r.flush()
	if _, err := r.objects.Get(context.Background(), wire.SegmentKey(room, s0)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal("segment written before it was due")
	}
	r.at(s0+3, 300) // seconds s0, s0+1, s0+2 are due
	r.flush()
	for i := int64(0); i < 3; i++ {
		seg := r.segment(s0 + i)
		if seg.Seq != uint64(i+1) || len(seg.Messages) != 0 || seg.Second != s0+i {
			t.Fatalf("segment %d = %+v", i, seg)
		}
	}
	if m := r.manifest(); m.Second != s0+2 || m.Seq != 3 {
		t.Fatalf("manifest = %+v", m)
	}
}

func TestMessagesLandInTheirSecond(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0, 120)
	b := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, User: "u1", Nick: "abcdefghij", Text: "hello"})
	r.at(s0, 800)
	g := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "u2", Gift: "rose", Value: 5, Order: "o1"})
	r.at(s0+1, 50)
	b2 := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, User: "u1", Text: "next"})
	r.at(s0+2, 300)
	r.flush()

	seg := r.segment(s0)
	if len(seg.Messages) != 2 || seg.Messages[0].ID != b[0].ID || seg.Messages[1].ID != g[0].ID {
		t.Fatalf("segment %d = %+v", s0, seg.Messages)
	}
	if seg.Messages[0].Offset != 120 || seg.Messages[1].Offset != 800 || seg.Messages[0].Nick != "abcdef" {
		t.Fatalf("slim fields wrong: %+v", seg.Messages)
	}
	if next := r.segment(s0 + 1); len(next.Messages) != 1 || next.Messages[0].ID != b2[0].ID {
		t.Fatalf("segment %d = %+v", s0+1, next.Messages)
	}
	// Written seconds are acknowledged and trimmed.
	left, _ := r.streams.Read(context.Background(), stream.Key{Room: room, Lane: stream.Barrage}, "0", 0, 0)
	if len(left) != 0 {
		t.Fatalf("barrage stream not trimmed: %d left", len(left))
	}
}

func TestGiftsNeverDroppedBarrageSampled(t *testing.T) {
	r := newRig(t, Config{Budget: 60})
	s0 := r.st.next
	r.at(s0, 100)
	var gifts []wire.Message
	for i := range 100 {
		gifts = append(gifts, wire.Message{Kind: wire.KindGift, User: fmt.Sprintf("g%d", i), Gift: "rose", Value: 1})
	}
	var barrage []wire.Message
	for i := range 200 {
		barrage = append(barrage, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("b%d", i), Text: "x"})
	}
	gifts = r.append(stream.Live, gifts...)
	r.append(stream.Barrage, barrage...)
	r.at(s0+5, 500)
	r.flush()

	seen := map[string]int{}
	barrageShown := 0
	for sec := s0; sec < s0+5; sec++ {
		seg := r.segment(sec)
		if len(seg.Messages) > 60 {
			t.Fatalf("second %d has %d messages over budget 60", sec, len(seg.Messages))
		}
		for _, m := range seg.Messages {
			if m.Kind == wire.KindGift {
				seen[m.ID]++
			} else {
				barrageShown++
			}
		}
	}
	for _, g := range gifts {
		if seen[g.ID] != 1 {
			t.Fatalf("gift %s appeared %d times", g.ID, seen[g.ID])
		}
	}
	// All 100 gifts (60 in s0, 40 in s0+1) leave the first second no barrage
	// budget; barrage of s0 is sampled away, not carried.
	if barrageShown != 0 {
		t.Fatalf("barrage shown %d, want 0", barrageShown)
	}
}

func TestBarrageUnderBudgetAllDelivered(t *testing.T) {
	r := newRig(t, Config{Budget: 60})
	s0 := r.st.next
	r.at(s0, 10)
	var in []wire.Message
	for i := range 50 {
		in = append(in, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Text: "hi"})
	}
	r.append(stream.Barrage, in...)
	r.at(s0+1, 300)
	r.flush()
	if n := len(r.segment(s0).Messages); n != 50 {
		t.Fatalf("got %d of 50", n)
	}
}

func TestExistingSegmentIsRespected(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0, 100)
	gs := r.append(stream.Live,
		wire.Message{Kind: wire.KindGift, User: "a", Gift: "rose", Value: 1},
		wire.Message{Kind: wire.KindGift, User: "b", Gift: "rose", Value: 1})
	// A predecessor already wrote s0 with the first gift only, as seq 7.
	r.putSegment(s0, 7, gs[0])
	r.at(s0+2, 300)
	r.flush()
	if seg := r.segment(s0); seg.Seq != 7 || len(seg.Messages) != 1 {
		t.Fatalf("existing segment overwritten: %+v", seg)
	}
	next := r.segment(s0 + 1)
	if next.Seq != 8 || len(next.Messages) != 1 || next.Messages[0].ID != gs[1].ID {
		t.Fatalf("missing gift not carried into the next second: %+v", next)
	}
}

func TestManifestNeverMovesBack(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	// Another writer published a newer manifest.
	ahead, _ := wire.EncodeManifest(&wire.Manifest{V: 1, Room: room, Second: s0 + 100, Seq: 50, Dur: 1000})
	if _, err := r.objects.Put(context.Background(), wire.ManifestKey(room), ahead, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r.at(s0+1, 300)
	r.flush()
	if m := r.manifest(); m.Second != s0+100 {
		t.Fatalf("manifest rolled back to %d", m.Second)
	}
}

func TestResumeContinuesAfterManifest(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0+2, 300)
	r.flush() // writes s0, s0+1
	st, err := r.s.resume(context.Background(), room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if st.next != s0+2 || st.seq != 3 {
		t.Fatalf("resumed at second %d seq %d, want %d, 3", st.next, st.seq, s0+2)
	}
}

func TestSetBudgetValidates(t *testing.T) {
	r := newRig(t, Config{})
	if err := r.s.SetBudget(0, DefaultShares); err == nil {
		t.Fatal("budget 0 accepted")
	}
	if err := r.s.SetBudget(10, Shares{0.5, 0.5, 0.5, 0}); err == nil {
		t.Fatal("shares summing to 1.5 accepted")
	}
	if err := r.s.SetBudget(10, Shares{0.25, 0.25, 0.25, 0.25}); err != nil {
		t.Fatal(err)
	}
}

func TestTakeoverReclaimsWithoutLossOrRepeat(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{NodeID: "a"})
	s0 := r.st.next
	r.at(s0, 100)
	gs := r.append(stream.Live,
		wire.Message{Kind: wire.KindGift, User: "a", Gift: "rose", Value: 1},
		wire.Message{Kind: wire.KindGift, User: "b", Gift: "rose", Value: 1})
	r.at(s0+1, 100)
	late := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "c", Gift: "rose", Value: 1})
	// Leader "a" read everything, wrote second s0 holding only the first
	// gift (as if the second arrived after the write), moved the manifest,
	// and died before acknowledging anything.
	if _, _, err := r.s.read(ctx, r.st); err != nil {
		t.Fatal(err)
	}
	r.putSegment(s0, 1, gs[0])
	man, _ := wire.EncodeManifest(&wire.Manifest{V: 1, Room: room, Second: s0, Seq: 1, Dur: 1000})
	if _, err := r.objects.Put(ctx, wire.ManifestKey(room), man, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	// Standby "b" takes over.
	b, err := New(Config{NodeID: "b", Streams: r.streams, Objects: r.objects, Clock: r.clk})
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.resume(ctx, room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.reclaim(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	r.s, r.st = b, st
	r.at(s0+3, 300)
	r.flush()

	count := map[string]int{}
	for sec := s0; sec <= s0+2; sec++ {
		seg := r.segment(sec)
		if seg.Seq != uint64(sec-s0+1) {
			t.Fatalf("second %d has seq %d", sec, seg.Seq)
		}
		for _, m := range seg.Messages {
			count[m.ID]++
		}
	}
	for _, g := range append(gs, late...) {
		if count[g.ID] != 1 {
			t.Fatalf("gift %s appears %d times; counts %v", g.ID, count[g.ID], count)
		}
	}
	// Everything is settled: nothing is left pending for anyone.
	left, _ := r.streams.Claim(ctx, stream.Key{Room: room, Lane: stream.Live}, "slicer", "x", 0, 0)
	if len(left) != 0 {
		t.Fatalf("%d messages still pending", len(left))
	}
}

func TestFailedWritesRetryInOrder(t *testing.T) {
	r := newRig(t, Config{})
	failing := &flakyStore{Store: r.objects}
	r.s.cfg.Objects = failing
	s0 := r.st.next
	r.at(s0, 100)
	g := r.append(stream.Live, wire.Message{Kind: wire.KindGift, User: "a", Gift: "rose", Value: 1})
	failing.down = true
	r.at(s0+4, 300)
	ctx := context.Background()
	if _, _, err := r.s.read(ctx, r.st); err != nil {
		t.Fatal(err)
	}
	if err := r.s.writeSlot(ctx, r.st, r.clk.Now(), r.clk.Now()); err == nil {
		t.Fatal("write succeeded while storage is down")
	}
	if r.st.next != s0 {
		t.Fatal("a failed second was skipped")
	}
	failing.down = false
	r.flush()
	for sec := s0; sec < s0+4; sec++ {
		seg := r.segment(sec)
		if seg.Seq != uint64(sec-s0+1) {
			t.Fatalf("second %d seq %d", sec, seg.Seq)
		}
		if sec == s0 && (len(seg.Messages) != 1 || seg.Messages[0].ID != g[0].ID) {
			t.Fatalf("gift lost: %+v", seg.Messages)
		}
	}
}

type flakyStore struct {
	objstore.Store
	down bool
}

func (f *flakyStore) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	if f.down {
		return "", errors.New("storage down")
	}
	return f.Store.Put(ctx, key, body, opts)
}

type auditSink struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *auditSink) Record(r audit.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
}

// TestSampledAudited: every barrage comment the budget leaves out of a
// segment is in the audit trail as sampled, with its stream id; the shown
// ones are not.
func TestSampledAudited(t *testing.T) {
	sink := &auditSink{}
	r := newRig(t, Config{Budget: 10, Audit: sink})
	s0 := r.st.next
	r.at(s0, 100)
	var in []wire.Message
	for i := range 50 {
		in = append(in, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Text: fmt.Sprintf("t%d", i)})
	}
	in = r.append(stream.Barrage, in...)
	r.at(s0+1, 300)
	r.flush()
	shown := map[string]bool{}
	for _, m := range r.segment(s0).Messages {
		shown[m.ID] = true
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(shown)+len(sink.recs) != len(in) {
		t.Fatalf("%d shown + %d sampled records, want %d", len(shown), len(sink.recs), len(in))
	}
	byID := map[string]wire.Message{}
	for _, m := range in {
		byID[m.ID] = m
	}
	for _, rec := range sink.recs {
		m, ok := byID[rec.ID]
		if !ok || shown[rec.ID] || rec.Decision != audit.Sampled || rec.User != m.User || rec.Text != m.Text || rec.Room != room {
			t.Fatalf("record %+v: want a sampled, unshown comment of the room", rec)
		}
	}
}
