package edge

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/gorilla/websocket"
)

// TestHelloWaitsCapped: sockets waiting for their hello are bounded per
// node (503 hello_waits) and per client address (429 hello_waits_addr),
// refused before the upgrade with a Retry-After and counted; a wait that
// ends frees its place, and a native client, which never waits, is not
// counted — on both kinds of socket.
func TestHelloWaitsCapped(t *testing.T) {
	for _, kind := range socketKinds {
		t.Run(kind.name, func(t *testing.T) {
			for _, tc := range []struct {
				name          string
				node, perAddr int
				status        int
				code          string
			}{
				{"node", 2, -1, http.StatusServiceUnavailable, CodeHelloWaits},
				{"address", -1, 2, http.StatusTooManyRequests, CodeHelloWaitsAddr},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, envOpts{wrap: kind.wrap, cfg: func(c *Config) {
						c.MaxHelloWaits, c.MaxHelloWaitsPerAddr = tc.node, tc.perAddr
					}})
					var waiting []*websocket.Conn
					for range 2 {
						ws, _, err := e.dialBrowser("")
						if err != nil {
							t.Fatal(err)
						}
						defer ws.Close()
						waiting = append(waiting, ws)
					}
					_, resp, err := e.dialBrowser("")
					if err == nil {
						t.Fatal("a third socket was let wait for its hello")
					}
					if resp.Header.Get("Retry-After") == "" {
						t.Error("no Retry-After")
					}
					checkCoded(t, resp, tc.status, tc.code)
					if got := counter(e.srv.m.rejects.WithLabelValues(tc.code)); got != 1 {
						t.Fatalf("%v rejections counted, want 1", got)
					}
					// A native client does not wait: not capped.
					e.connect("r1", "")
					// The first says hello: its place is free again.
					if err := text(`{"token":"` + e.token("r1") + `"}`)(waiting[0]); err != nil {
						t.Fatal(err)
					}
					waitFor(t, "the hello to be taken", func() bool { return e.srv.hellos.n.Load() == 1 })
					ws, _, err := e.dialBrowser("")
					if err != nil {
						t.Fatalf("a socket was refused after a wait ended: %v", err)
					}
					ws.Close()
				})
			}
		})
	}
}

// TestHelloInPieces: a hello in fragments with a ping between them, and a
// report sent right behind it in the same write, are read as a goroutine
// reads them: the connection joins and the report is counted.
func TestHelloInPieces(t *testing.T) {
	for _, kind := range socketKinds {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, envOpts{wrap: kind.wrap})
			hello := []byte(`{"token":"` + e.token("r1") + `"}`)
			all := bytes.Join([][]byte{
				rawFrame(0x01, true, hello[:10]),
				rawFrame(0x89, true, []byte("p")),
				rawFrame(0x80, true, hello[10:]),
				rawFrame(0x81, true, []byte(`{"drops":2}`)),
			}, nil)
			dialSending(t, e.ts.Listener.Addr().String(), "", all)
			waitFor(t, "the viewer to join and its report to count", func() bool {
				return e.srv.OnlineRooms()["r1"] == 1 && counter(e.srv.m.renderDrops) == 2
			})
		})
	}
}
