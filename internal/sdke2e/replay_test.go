package sdke2e

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"danmaku/internal/objstore"
	"danmaku/internal/origin"
	"danmaku/sdk"
	"danmaku/sdk/wire"
)

// TestReplaySubSecond: a 500 ms room is replayed from its ms/ keys, at the
// duration its manifest names, slot by slot.
func TestReplaySubSecond(t *testing.T) {
	t.Parallel()
	const room = "r1"
	objects := objstore.NewMemoryStore()
	put := func(key string, body []byte) {
		if _, err := objects.Put(context.Background(), key, body, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const sec = 1_600_000_000
	var last *wire.Segment
	for i := range int64(4) {
		slot := sec*2 + i
		seg := wire.NewSegment(room, 500, slot, uint64(i+1))
		seg.Messages = []wire.Message{wire.Slim(wire.Message{ID: wire.FormatID(slot*500+1, 0), Kind: sdk.KindBarrage, Text: "m"})}
		b, err := wire.EncodeSegment(seg)
		if err != nil {
			t.Fatal(err)
		}
		put(wire.SlotKey(room, 500, slot), b)
		last = seg
	}
	mb, _ := wire.EncodeManifest(wire.ManifestFor(last))
	put(wire.ManifestKey(room), mb)
	e := gin.New()
	origin.Register(e, objects)
	srv := httptest.NewServer(e)
	defer srv.Close()

	var got []string
	if err := sdk.Replay(context.Background(), srv.URL, room, sec, sec+2, func(m sdk.Message) error {
		got = append(got, m.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] != wire.FormatID(sec*1000+1, 0) || got[3] != wire.FormatID(sec*1000+1501, 0) {
		t.Fatalf("replayed %v", got)
	}
}
