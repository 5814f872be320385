package sdk

import (
	"context"
	"log/slog"
	"testing"

	"danmaku/sdk/wire"
)

// FuzzDecodeSegment feeds arbitrary bytes to the poller's segment path:
// wire.DecodeSegment, the room/second check, the seq check, de-duplication
// and delivery. It must never panic, and every message of an accepted
// segment is delivered once or counted as skipped.
func FuzzDecodeSegment(f *testing.F) {
	g := Message{ID: "1700000000100-0", Kind: KindGift, Gift: "rose", Value: 100, Count: 2,
		Merged: []string{"1700000000100-0", "1700000000100-1"}}
	valid, err := wire.EncodeSegment(&wire.Segment{V: 1, Room: "r1", Second: 1_700_000_000, Seq: 7, Dur: 1000,
		Messages: []Message{
			wire.Slim(Message{ID: "1700000000005-0", Kind: KindBarrage, User: "u", Nick: "nick", Text: "hi"}),
			wire.Slim(g),
			wire.Slim(Message{ID: "1700000000005-0", Kind: KindBarrage, Text: "dup"}),
			wire.Slim(Message{ID: "1700000000999-3", Kind: KindSystem, Role: "host", Text: "welcome"}),
		}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add(valid[:len(valid)/2])

	f.Fuzz(func(t *testing.T, b []byte) {
		room, second := "r1", int64(1_700_000_000)
		seg, decErr := wire.DecodeSegment(b)
		if decErr == nil {
			// Let a well-formed segment through the room/second check
			// so the delivery path is exercised too.
			room, second = seg.Room, seg.Second
		}
		c, err := New(Config{EntryURL: "http://127.0.0.1:1", Room: room, Ticket: "t",
			Logger: slog.New(slog.DiscardHandler), MessageBuffer: 16})
		if err != nil {
			t.Fatal(err)
		}
		c.sess.Store(&session{entry: Entry{Room: room, CDN: "http://127.0.0.1:1/", Token: "x", ServerTimeMs: 1}})
		ctx, cancel := context.WithCancel(context.Background())
		seen := map[string]bool{}
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for {
				select {
				case m := <-c.msgs:
					if seen[m.ID] {
						t.Errorf("id %s delivered twice", m.ID)
					}
					seen[m.ID] = true
				case <-ctx.Done():
					return
				}
			}
		}()
		p := &poller{c: c, dur: 1000, slot: second, seq: 3, haveSeq: true}
		p.handle(ctx, b)
		p.next()
		// The same bytes again: a segment that is not the slot's, already
		// asked for again as often as a poller does.
		p.mismatches = mismatchRetries
		p.handle(ctx, b)
		cancel()
		<-drained

		st := c.Stats()
		if decErr != nil {
			if st.DecodeErrors != 2 || st.Delivered != 0 {
				t.Fatalf("undecodable input: stats %+v", st)
			}
			return
		}
		if st.DecodeErrors != 1 {
			t.Fatalf("DecodeErrors = %d, want 1 (the replay under the wrong second)", st.DecodeErrors)
		}
		if n := st.Delivered + st.Duplicates + st.DroppedBarrage; n != int64(len(seg.Messages)) {
			t.Fatalf("%d messages, %d accounted for: %+v", len(seg.Messages), n, st)
		}
	})
}
