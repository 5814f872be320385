package sdkweb_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"danmaku/sdk/wire"
)

// TestTakedownWireJS holds the web SDK's decoding of takedowns to what
// sdk/wire writes: a segment's td, a frame of td only (its m nil), a
// manifest's td count and the room's takedown list decode in danmaku.js to
// the same ids and kinds.
func TestTakedownWireJS(t *testing.T) {
	node := tools(t, false)
	td := []wire.TakenDown{{ID: "1700000000123-0", Kind: wire.KindBarrage}, {ID: "1699999999000-7", Kind: wire.KindGift}}
	seg := wire.NewSegment("room_1", 1000, 1700000001, 5)
	seg.Messages = []wire.Message{{ID: "1700000001001-0", Kind: wire.KindBarrage, Text: "kept"}}
	seg.TakenDown = td
	segB, err := wire.EncodeSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	frameB, err := wire.EncodeFrame(&wire.Frame{V: wire.Version, Room: "room_1", TakenDown: td[:1]})
	if err != nil {
		t.Fatal(err)
	}
	man := wire.ManifestFor(seg)
	man.Takedowns = 7
	manB, err := wire.EncodeManifest(man)
	if err != nil {
		t.Fatal(err)
	}
	listB, err := wire.EncodeTakedownList(&wire.TakedownList{V: 1, Room: "room_1", N: 7, IDs: td})
	if err != nil {
		t.Fatal(err)
	}
	emptyB, err := wire.EncodeTakedownList(&wire.TakedownList{V: 1, Room: "room_1"})
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	script := `
import { decodeSegment, decodeFrame, decodeTakedownList, manifestTakedowns, takedownListKey } from './danmaku.js';
const [seg, frame, man, list, empty] = process.argv.slice(1);
const bytes = (s) => new Uint8Array(Buffer.from(s, 'base64'));
const s = decodeSegment(bytes(seg)), f = decodeFrame(bytes(frame));
console.log('RESULT ' + JSON.stringify({
  seg: s.takedowns, segMessages: s.messages.map((m) => m.id), frame: f.takedowns, frameMessages: f.messages.length,
  manifest: manifestTakedowns(JSON.parse(Buffer.from(man, 'base64'))),
  list: decodeTakedownList(JSON.parse(Buffer.from(list, 'base64')), 'room_1'),
  empty: decodeTakedownList(JSON.parse(Buffer.from(empty, 'base64')), 'room_1'),
  key: takedownListKey('room_1'),
}));`
	out := runNode(t, node, nil, time.Minute, "--input-type=module", "-e", script, b64(segB), b64(frameB), b64(manB), b64(listB), b64(emptyB))
	i := strings.Index(out, "RESULT ")
	if i < 0 {
		t.Fatalf("no result in %q", out)
	}
	type td1 struct {
		ID   string `json:"id"`
		Kind int    `json:"kind"`
	}
	var got struct {
		Seg           []td1    `json:"seg"`
		SegMessages   []string `json:"segMessages"`
		Frame         []td1    `json:"frame"`
		FrameMessages int      `json:"frameMessages"`
		Manifest      int      `json:"manifest"`
		List          struct {
			N   int   `json:"n"`
			IDs []td1 `json:"ids"`
		} `json:"list"`
		Empty struct {
			N   int   `json:"n"`
			IDs []td1 `json:"ids"`
		} `json:"empty"`
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out[i+len("RESULT "):])), &got); err != nil {
		t.Fatal(err)
	}
	want := []td1{{"1700000000123-0", 1}, {"1699999999000-7", 2}}
	eq := func(a, b []td1) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if !eq(got.Seg, want) || len(got.SegMessages) != 1 || !eq(got.Frame, want[:1]) || got.FrameMessages != 0 {
		t.Errorf("segment and frame: %+v", got)
	}
	if got.Manifest != 7 || got.List.N != 7 || !eq(got.List.IDs, want) || got.Empty.N != 0 || len(got.Empty.IDs) != 0 {
		t.Errorf("manifest and list: %+v", got)
	}
	if got.Key != wire.TakedownListKey("room_1") {
		t.Errorf("list key %q, want %q", got.Key, wire.TakedownListKey("room_1"))
	}
}
