package sdk

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The client reports render drops and held-back sends to the edge as
// changes since the last report, across reconnects.
func TestCounterReportsReachTheEdge(t *testing.T) {
	w := newWorld(t)
	var (
		mu      sync.Mutex
		reports []counterReport
	)
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			var r counterReport
			if typ == websocket.TextMessage && json.Unmarshal(data, &r) == nil {
				mu.Lock()
				reports = append(reports, r)
				mu.Unlock()
			}
		}
	}
	rq, err := NewRenderQueue(RenderConfig{Visible: 1, Buffer: 1, Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // 3 of these overflow the one-message buffer
		rq.Push(Message{ID: "1-" + string(rune('0'+i)), Kind: KindBarrage})
	}
	w.run()
	w.newClient(func(cfg *Config) {
		cfg.Render = rq
		cfg.ReportInterval = 20 * time.Millisecond
	})
	total := func() (drops, held int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range reports {
			drops += r.Drops
			held += r.Held
		}
		return
	}
	eventually(t, "the drops reported", func() bool { d, _ := total(); return d == 3 })
	rq.Push(Message{ID: "1-9", Kind: KindBarrage}) // one more drop
	eventually(t, "the next drop reported once", func() bool { d, _ := total(); return d == 4 })
	mu.Lock()
	defer mu.Unlock()
	for _, r := range reports {
		if r.Drops == 0 && r.Held == 0 {
			t.Fatalf("empty report sent: %+v", reports)
		}
	}
}
