package slicer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

func (r *rig) takedownList() *wire.TakedownList {
	r.t.Helper()
	obj, err := r.objects.Get(context.Background(), wire.TakedownListKey(room))
	if err != nil {
		r.t.Fatalf("takedown list: %v", err)
	}
	if obj.CacheControl != wire.TakedownListCacheControl || obj.ContentType != wire.TakedownListContentType {
		r.t.Fatalf("takedown list headers %q %q", obj.CacheControl, obj.ContentType)
	}
	l, err := wire.DecodeTakedownList(obj.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

func takedownOf(id string, k wire.Kind) wire.Message {
	return wire.Message{Kind: wire.KindSystem, TakenDown: []wire.TakenDown{{ID: id, Kind: k}}}
}

// TestTakedownThroughTheSlicer: a takedown read from the live lane is
// named in the td of the segment of its slot; a taken-down message of a
// slot not yet written is left out of it; the list object and the
// manifest's td follow, and a new leader carries the list on.
func TestTakedownThroughTheSlicer(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	r.at(s0, 100)
	shown := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, User: "u1", Text: "published"})
	r.at(s0+1, 300)
	r.flush() // s0 written with the comment
	if seg := r.segment(s0); len(seg.Messages) != 1 || seg.Messages[0].ID != shown[0].ID || seg.TakenDown != nil {
		t.Fatalf("segment %d = %+v", s0, seg)
	}
	if _, err := r.objects.Get(context.Background(), wire.TakedownListKey(room)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a list written before any takedown: %v", err)
	}
	if m := r.manifest(); m.Takedowns != 0 {
		t.Fatalf("manifest td = %d before any takedown", m.Takedowns)
	}

	// In s0+1: a comment that will be taken down before its segment is
	// written, and the takedown of the published one; the second
	// takedown (of the unwritten one) comes in s0+2, after it.
	r.at(s0+1, 400)
	hidden := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, User: "u2", Text: "never shown"})
	kept := r.append(stream.Barrage, wire.Message{Kind: wire.KindBarrage, User: "u3", Text: "kept"})
	r.at(s0+1, 500)
	td1 := r.append(stream.Live, takedownOf(shown[0].ID, wire.KindBarrage))
	r.at(s0+2, 10)
	r.append(stream.Live, takedownOf(hidden[0].ID, wire.KindBarrage))
	r.at(s0+3, 300)
	r.flush()

	seg1 := r.segment(s0 + 1)
	if len(seg1.Messages) != 1 || seg1.Messages[0].ID != kept[0].ID {
		t.Fatalf("segment %d messages %+v: want only the kept comment", s0+1, seg1.Messages)
	}
	if want := []wire.TakenDown{{ID: shown[0].ID, Kind: wire.KindBarrage}}; !slices.Equal(seg1.TakenDown, want) {
		t.Fatalf("segment %d td %+v, want %+v", s0+1, seg1.TakenDown, want)
	}
	if want := []wire.TakenDown{{ID: hidden[0].ID, Kind: wire.KindBarrage}}; !slices.Equal(r.segment(s0+2).TakenDown, want) {
		t.Fatalf("segment %d td %+v, want %+v", s0+2, r.segment(s0+2).TakenDown, want)
	}
	want := []wire.TakenDown{{ID: shown[0].ID, Kind: wire.KindBarrage}, {ID: hidden[0].ID, Kind: wire.KindBarrage}}
	if l := r.takedownList(); l.V != 1 || l.Room != room || l.N != 2 || !slices.Equal(l.IDs, want) {
		t.Fatalf("list %+v, want both", l)
	}
	if m := r.manifest(); m.Takedowns != 2 || m.Second != s0+2 {
		t.Fatalf("manifest %+v, want td 2", m)
	}
	// The takedown entries are settled and trimmed like any message.
	if left, _ := r.streams.Read(context.Background(), stream.Key{Room: room, Lane: stream.Live}, "0", 0, 0); len(left) != 0 {
		t.Fatalf("live lane not trimmed: %+v (takedown %s)", left, td1[0].ID)
	}

	// The same takedown again (a retried API call) changes neither list
	// nor count; a new leader starts from the published list and leaves
	// its messages out too.
	r.at(s0+3, 400)
	r.append(stream.Live, takedownOf(shown[0].ID, wire.KindBarrage))
	r.at(s0+4, 300)
	r.flush()
	if l := r.takedownList(); l.N != 2 {
		t.Fatalf("list after a repeat: %+v", l)
	}
	st, err := r.s.resume(context.Background(), room, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.td.set["b/"+hidden[0].ID] || st.td.published != 2 {
		t.Fatalf("resumed takedowns %+v", st.td)
	}
}

// TestTakedownListMerges: a list another leader wrote meanwhile is merged,
// never overwritten.
func TestTakedownListMerges(t *testing.T) {
	r := newRig(t, Config{})
	s0 := r.st.next
	other := &wire.TakedownList{V: 1, Room: room, N: 1, IDs: []wire.TakenDown{{ID: "1-1", Kind: wire.KindGift}}}
	body, err := wire.EncodeTakedownList(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.objects.Put(context.Background(), wire.TakedownListKey(room), body, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r.at(s0, 100)
	r.append(stream.Live, takedownOf("2-2", wire.KindBarrage))
	r.at(s0+1, 300)
	r.flush()
	want := []wire.TakenDown{{ID: "1-1", Kind: wire.KindGift}, {ID: "2-2", Kind: wire.KindBarrage}}
	if l := r.takedownList(); l.N != 2 || !slices.Equal(l.IDs, want) {
		t.Fatalf("list %+v, want %+v", l, want)
	}
	if m := r.manifest(); m.Takedowns != 2 {
		t.Fatalf("manifest td %d", m.Takedowns)
	}
}

func TestTakedownsBounded(t *testing.T) {
	var td takedowns
	for i := range maxTakedowns + 5 {
		td.note([]wire.TakenDown{{ID: wire.FormatID(1, uint64(i)), Kind: wire.KindBarrage}})
	}
	if n := td.note([]wire.TakenDown{{ID: "1-0", Kind: wire.KindBarrage}, {ID: "bad", Kind: wire.KindBarrage}}); n != 0 || len(td.list) != maxTakedowns {
		t.Fatalf("added %d, holds %d", n, len(td.list))
	}
}
