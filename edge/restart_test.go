package edge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

// TestEdgeRestartUnderClients: many clients on edge A while gifts arrive;
// A drains (a restart's first half); each client, closed with 4003,
// reconnects to edge B — its token's next address — with the last id it
// had. Every client ends with every gift exactly once, in order.
func TestEdgeRestartUnderClients(t *testing.T) {
	clients := 1000
	if raceEnabled {
		clients = 200 // the race detector's memory and CPU on 2 cores
	}
	const gifts = 60
	a := newEnv(t, envOpts{cfg: func(c *Config) { c.DrainPeriod = 300 * time.Millisecond; c.ConnectRate = -1 }})
	b := newEnv(t, envOpts{store: a.store, cfg: func(c *Config) { c.ConnectRate = -1 }})
	d := &websocket.Dialer{HandshakeTimeout: safety}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		received = make([][]string, clients)
		failures []error
		moved    int
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	connected := make(chan struct{}, clients)
	for i := range clients {
		tok := signTokenFor(t, a.keys, fmt.Sprintf("viewer-%d", i), "r1", a.addr, b.addr)
		ws, _, err := a.dialWith(d, tok, "")
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := ""
			env := a
			for attempt := 0; ; attempt++ {
				if ws == nil {
					if attempt > 5 {
						fail(fmt.Errorf("client %d: gave up reconnecting", i))
						return
					}
					env = b
					var err error
					if ws, _, err = b.dialWith(d, tok, last); err != nil {
						fail(fmt.Errorf("client %d: reconnect: %v", i, err))
						return
					}
					mu.Lock()
					moved++
					mu.Unlock()
				}
				if attempt == 0 {
					connected <- struct{}{}
				}
				for {
					_ = ws.SetReadDeadline(time.Now().Add(safety))
					typ, buf, err := ws.ReadMessage()
					var ce *websocket.CloseError
					if errors.As(err, &ce) && ce.Code == CloseGoingAway && env == a {
						ws.Close()
						ws = nil
						break
					}
					if err != nil {
						fail(fmt.Errorf("client %d on %s: %v", i, env.addr, err))
						ws.Close()
						return
					}
					if typ != websocket.BinaryMessage {
						continue
					}
					f, err := wire.DecodeFrame(buf)
					if err != nil {
						fail(fmt.Errorf("client %d: %v", i, err))
						ws.Close()
						return
					}
					done := false
					for _, m := range f.Messages {
						received[i] = append(received[i], m.ID)
						last = m.ID
						done = done || (m.Kind == wire.KindSystem && m.Text == "end")
					}
					if done {
						ws.Close()
						return
					}
				}
			}
		}()
	}
	for range clients {
		<-connected
	}

	var want []string
	for g := range gifts {
		want = append(want, a.append("r1", gift(int64(10+g), 1))[0].ID)
		if g == gifts/3 {
			go func() { _ = a.srv.Shutdown(context.Background()) }()
		}
		time.Sleep(5 * time.Millisecond)
	}
	want = append(want, a.append("r1", sys("end"))[0].ID)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failures, the first: %v", len(failures), failures[0])
	}
	if moved == 0 {
		t.Fatal("no client moved to the second edge")
	}
	for i, got := range received {
		if len(got) != len(want) {
			t.Fatalf("client %d got %d messages, want %d (gifts exactly once)", i, len(got), len(want))
		}
		for k := range got {
			if got[k] != want[k] {
				t.Fatalf("client %d message %d: %s, want %s", i, k, got[k], want[k])
			}
		}
	}
	t.Logf("%d clients, %d moved from the draining edge to the other; each got %d gifts exactly once", clients, moved, gifts)
}
