package edge

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/edge/edgetest"
	"danmaku/internal/clock"
	"danmaku/sdk/wire"
)

// Hostile input the edge gets from outside, one test per kind; the
// catalogue in docs/reliability.md ("Hostile input: what each gets")
// names them.

// TestTokenInURLAnyCase: a query parameter is a token in the URL whatever
// the case of its name, refused before anything else is read.
func TestTokenInURLAnyCase(t *testing.T) {
	e := newEnv(t, envOpts{})
	good := e.token("r1")
	for _, name := range []string{"token", "Token", "TOKEN", "tOkEn"} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest("GET", e.ts.URL+Path+"?"+name+"=SECRET", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = http.Header{
				"Authorization": {"Bearer " + good},
				"Connection":    {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			checkCoded(t, resp, http.StatusBadRequest, CodeTokenInURL)
		})
	}
}

// TestLastAheadClosed: a last id further ahead than the room can have
// written is closed with CloseResumeGap (reconnect without last) instead of
// withholding every message up to it, by header and by hello; one a little
// ahead is honoured (TestResumeAhead).
func TestLastAheadClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	newest := e.append("r1", sys("newest"))[0]
	ms, _, err := wire.ParseID(newest.ID)
	if err != nil {
		t.Fatal(err)
	}
	far := wire.FormatID(max(ms, time.Now().UnixMilli())+time.Hour.Milliseconds(), 0)
	t.Run("header", func(t *testing.T) {
		ws, _, err := e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, e.token("r1"), far)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		if got := closeCode(t, ws); got != CloseResumeGap {
			t.Fatalf("close code %d, want %d", got, CloseResumeGap)
		}
	})
	t.Run("hello", func(t *testing.T) {
		ws, _, err := e.dialBrowser("")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		if err := text(`{"token":"` + e.token("r1") + `","last":"` + far + `"}`)(ws); err != nil {
			t.Fatal(err)
		}
		if got := closeCode(t, ws); got != CloseResumeGap {
			t.Fatalf("close code %d, want %d", got, CloseResumeGap)
		}
	})
	waitFor(t, "both closes counted", func() bool {
		return counter(e.srv.m.closes.WithLabelValues(reasonGap)) == 2 && e.srv.Load().Conns == 0
	})
	if n := e.srv.OnlineRooms()["r1"]; n != 0 {
		t.Fatalf("%d viewers online after both were closed", n)
	}
}

// opaqueListener hides the *net.TCPConn of what it accepts: no epoll loop
// can own those sockets, so they are served by goSocks.
type opaqueListener struct{ net.Listener }

type opaqueConn struct{ net.Conn }

func (l opaqueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return opaqueConn{c}, nil
}

// TestCloseAnswered: the edge answers a client's close frame with the
// client's code only when a peer may send that code; a code no peer may
// send, or a one-byte payload, gets 1002, a reason that is not UTF-8 1007
// — on both kinds of socket.
func TestCloseAnswered(t *testing.T) {
	code := func(c uint16, reason string) []byte {
		return append(binary.BigEndian.AppendUint16(nil, c), reason...)
	}
	tests := []struct {
		name    string
		payload []byte
		want    int // -1: a close frame without a code
	}{
		{"no payload", nil, -1},
		{"normal", code(1000, "bye"), 1000},
		{"going away", code(1001, ""), 1001},
		{"try again later", code(1013, ""), 1013},
		{"application", code(3000, ""), 3000},
		{"private", code(4999, ""), 4999},
		{"one byte", []byte{0x03}, closeProtocol},
		{"999", code(999, ""), closeProtocol},
		{"1004 reserved", code(1004, ""), closeProtocol},
		{"1005 no status", code(1005, ""), closeProtocol},
		{"1006 abnormal", code(1006, ""), closeProtocol},
		{"1015 TLS", code(1015, ""), closeProtocol},
		{"1016", code(1016, ""), closeProtocol},
		{"2999", code(2999, ""), closeProtocol},
		{"5000", code(5000, ""), closeProtocol},
		{"65535", code(65535, ""), closeProtocol},
		{"reason not UTF-8", code(1000, "\xff\xfe"), closeBadData},
	}
	for _, kind := range socketKinds {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, envOpts{wrap: kind.wrap})
			addr := e.ts.Listener.Addr().String()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					c, br := dialSending(t, addr, e.token("r1"), rawFrame(0x88, true, tt.payload))
					p := closePayload(t, c, br)
					got := -1
					if len(p) >= 2 {
						got = int(binary.BigEndian.Uint16(p))
					}
					if got != tt.want || len(p) == 1 {
						t.Fatalf("close payload %q (code %d), want code %d", p, got, tt.want)
					}
				})
			}
			waitFor(t, "every slot to free", func() bool { return e.srv.Load().Conns == 0 })
		})
	}
}

// TestUpgradeRefusedCoded: a handshake the WebSocket library would refuse
// in plain text — HTTP/1.0, the upgrade in a second Connection header or
// after another protocol — gets the coded 400, with a token or without.
func TestUpgradeRefusedCoded(t *testing.T) {
	e := newEnv(t, envOpts{})
	addr := e.ts.Listener.Addr().String()
	const key = "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	tests := []struct {
		name, proto, headers string
	}{
		{"HTTP/1.0", "HTTP/1.0", "Upgrade: websocket\r\nConnection: Upgrade\r\n"},
		{"Connection split", "HTTP/1.1", "Upgrade: websocket\r\nConnection: keep-alive\r\nConnection: Upgrade\r\n"},
		{"Upgrade list", "HTTP/1.1", "Upgrade: h2c, websocket\r\nConnection: Upgrade\r\n"},
	}
	for _, tt := range tests {
		for _, auth := range []string{"", "Authorization: Bearer " + e.token("r1") + "\r\n"} {
			t.Run(fmt.Sprintf("%s/token=%v", tt.name, auth != ""), func(t *testing.T) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(safety))
				req := "GET " + Path + " " + tt.proto + "\r\nHost: " + addr + "\r\n" + auth + tt.headers + key + "\r\n"
				if _, err := io.WriteString(c, req); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				checkCoded(t, resp, http.StatusBadRequest, CodeBadRequest)
			})
		}
	}
}

// TestPongFloodNeighbourServed: a client that sends pongs as fast as it
// can is closed with ClosePolicy (unasked pongs count against the
// allowance, a burst of 10), and its neighbours — one of them in its
// epoll loop: maxLoops neighbours dialled first, handed out round-robin —
// receive every frame of a broadcast sent during the flood and stay
// connected. Once a pong flood got a neighbour closed 631 ms in. The
// allowance runs on the frozen clock: the flooder earns nothing back.
func TestPongFloodNeighbourServed(t *testing.T) {
	for _, kind := range socketKinds {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, envOpts{wrap: kind.wrap, cfg: func(c *Config) { c.Clock = clock.NewFake(time.Now()) }})
			neighbours := make([]*websocket.Conn, maxLoops)
			for i := range neighbours {
				neighbours[i] = e.connect("r1", "")
			}
			c, br, err := edgetest.Dial(e.ts.Listener.Addr().String(), e.token("r1"))
			if err != nil {
				t.Fatal(err)
			}
			var flood []byte
			for range 64 { // 8 KiB a write: sent moves while the edge reads
				flood = append(flood, rawFrame(0x8A, true, []byte(strings.Repeat("p", 125)))...)
			}
			var sent atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for { // until the edge closes the socket (or the test does)
					n, err := c.Write(flood)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			defer func() { c.Close(); <-done }()
			closed := make(chan int, 1)
			go func() { // the flooder reads its close at once: the edge ends it after closeGrace
				p, err := readClose(c, br)
				if err != nil || len(p) < 2 {
					closed <- -1
					return
				}
				closed <- int(binary.BigEndian.Uint16(p))
			}()
			// 32 KiB is 250 pongs, and 11 close it: on a fast edge the close
			// can come before that much is written, and the writer stops. The
			// neighbours are checked either way (on a loaded machine this
			// waited for ever for bytes the closed socket would not take).
			waitFor(t, "the flood to be under way", func() bool {
				select {
				case <-done:
					return true
				default:
					return sent.Load() >= 32<<10
				}
			})

			var want []string
			for i := range 100 {
				want = append(want, ids(e.append("r1", sys(fmt.Sprintf("during the flood %d", i))))...)
			}
			for i, ws := range neighbours {
				got, err := readUntil(ws, "r1", untilID(want[len(want)-1]))
				if err != nil {
					t.Fatalf("neighbour %d: %v after %d messages (flooder sent %d bytes)", i, err, len(got), sent.Load())
				}
				sameIDs(t, fmt.Sprintf("neighbour %d", i), got, want)
			}
			if got := <-closed; got != ClosePolicy {
				t.Fatalf("flooder closed with %d, want %d", got, ClosePolicy)
			}
			waitFor(t, "the flooder to be gone", func() bool {
				return e.srv.Load().Conns == len(neighbours) && counter(e.srv.m.closes.WithLabelValues(reasonPolicy)) == 1
			})
			t.Logf("flooder sent %d KiB", sent.Load()>>10)
		})
	}
}

// TestAnsweredPongsFree: a pong answering one of the edge's pings costs
// nothing: a client that answers three bursts' worth of pings (on a frozen
// clock the allowance earns nothing back) is still served.
func TestAnsweredPongsFree(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.Clock = clock.NewFake(time.Now())
		c.PingInterval, c.PongGrace = 5*time.Millisecond, safety
	}})
	ws := e.connect("r1", "")
	pongs := 0
	ws.SetPingHandler(func(p string) error { // on the reader's goroutine
		if err := ws.WriteControl(websocket.PongMessage, []byte(p), time.Now().Add(safety)); err != nil {
			return err
		}
		if pongs++; pongs == 3*clientMsgBurst {
			// Behind the pongs on the wire: once it is counted, they were.
			return ws.WriteMessage(websocket.TextMessage, []byte(`{"drops":1}`))
		}
		return nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := readUntil(ws, "r1", func(ms []wire.Message) bool {
			return len(ms) > 0 && ms[len(ms)-1].Text == "end"
		})
		errc <- err
	}()
	waitFor(t, "the report behind the pongs", func() bool { return counter(e.srv.m.renderDrops) == 1 })
	e.append("r1", sys("end"))
	if err := <-errc; err != nil {
		t.Fatalf("client answering pings: %v", err)
	}
}
