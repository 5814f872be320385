package edge

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

// readFrames reads frames until stop says so, returning their messages and
// takedowns.
func readFrames(ws *websocket.Conn, room string, stop func(ms []wire.Message, td []wire.TakenDown) bool) ([]wire.Message, []wire.TakenDown, error) {
	var ms []wire.Message
	var td []wire.TakenDown
	for !stop(ms, td) {
		_ = ws.SetReadDeadline(time.Now().Add(safety))
		_, b, err := ws.ReadMessage()
		if err != nil {
			return ms, td, err
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			return ms, td, err
		}
		if f.Room != room || len(f.Messages)+len(f.TakenDown) == 0 {
			return ms, td, fmt.Errorf("bad frame: room %q, %d messages, %d takedowns", f.Room, len(f.Messages), len(f.TakenDown))
		}
		ms = append(ms, f.Messages...)
		td = append(td, f.TakenDown...)
	}
	return ms, td, nil
}

func takedownEntry(id string, k wire.Kind) wire.Message {
	return wire.Message{Kind: wire.KindSystem, TakenDown: []wire.TakenDown{{ID: id, Kind: k}}}
}

// TestTakedownReachesConnectedViewers: a takedown entry of the live lane
// reaches every connected viewer in a frame's td (never as a message), in
// order with the messages around it, and a viewer resuming from before it
// gets it in its catch-up.
func TestTakedownReachesConnectedViewers(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := e.connect("r1", ""), e.connect("r1", "")
	shown := e.append("r1", sys("before"))
	want := []wire.TakenDown{{ID: "1700000000000-4", Kind: wire.KindBarrage}, {ID: shown[0].ID, Kind: wire.KindSystem}}
	e.append("r1", takedownEntry(want[0].ID, want[0].Kind), takedownEntry(want[1].ID, want[1].Kind))
	after := e.append("r1", sys("after"))
	stop := func(ms []wire.Message, td []wire.TakenDown) bool {
		return len(ms) > 0 && ms[len(ms)-1].ID == after[0].ID
	}
	for name, ws := range map[string]*websocket.Conn{"a": a, "b": b} {
		ms, td, err := readFrames(ws, "r1", stop)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameIDs(t, name, ms, []string{shown[0].ID, after[0].ID})
		if !slices.Equal(td, want) {
			t.Fatalf("%s: takedowns %+v, want %+v", name, td, want)
		}
	}
	// A viewer resuming from the first message: the takedowns come in its
	// catch-up, from the ring.
	c := e.connect("r1", shown[0].ID)
	ms, td, err := readFrames(c, "r1", stop)
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "resumed", ms, []string{after[0].ID})
	if !slices.Equal(td, want) {
		t.Fatalf("resumed: takedowns %+v, want %+v", td, want)
	}
}

func TestFrameOf(t *testing.T) {
	ms := []wire.Message{{ID: "1-0", Kind: wire.KindSystem, Text: "x"}, {ID: "1-1", Kind: wire.KindSystem, TakenDown: []wire.TakenDown{{ID: "0-5", Kind: wire.KindBarrage}}}}
	f := frameOf("r", ms)
	if len(f.Messages) != 1 || f.Messages[0].ID != "1-0" || len(f.TakenDown) != 1 || f.TakenDown[0].ID != "0-5" {
		t.Fatalf("frame %+v", f)
	}
	if g := frameOf("r", ms[:1]); &g.Messages[0] != &ms[0] {
		t.Fatal("a frame without takedowns copied its messages")
	}
	if !pushable(&ms[1], 1<<62) {
		t.Fatal("a takedown entry is not pushable")
	}
}
