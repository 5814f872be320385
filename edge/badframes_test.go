package edge

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/edge/edgetest"
	"danmaku/sdk/wire"
)

// rawFrame encodes a client frame by hand, however wrong: b0 is the first
// byte (FIN, RSV, opcode), masked says whether a mask key follows.
func rawFrame(b0 byte, masked bool, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteByte(b0)
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch l := len(payload); {
	case l <= 125:
		b.WriteByte(m | byte(l))
	case l <= 0xFFFF:
		b.WriteByte(m | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(l))
	default:
		b.WriteByte(m | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(l))
	}
	if masked {
		b.Write([]byte{0, 0, 0, 0}) // a zero mask leaves the payload as is
	}
	b.Write(payload)
	return b.Bytes()
}

// readCloseCode reads until the edge's close frame and returns its code.
func readCloseCode(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	p := closePayload(t, c, br)
	if len(p) < 2 {
		t.Fatalf("close frame without a code")
	}
	return int(binary.BigEndian.Uint16(p))
}

// dialSending connects with tok and writes frames; the connection closes
// with the test.
func dialSending(t *testing.T, addr, tok string, frames ...[]byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, br, err := edgetest.Dial(addr, tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, f := range frames {
		if _, err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	return c, br
}

// closePayload reads until the edge's close frame and returns its payload.
func closePayload(t *testing.T, c net.Conn, br *bufio.Reader) []byte {
	t.Helper()
	p, err := readClose(c, br)
	if err != nil {
		t.Fatalf("no close frame: %v", err)
	}
	return p
}

// readClose reads until the edge's close frame and returns its payload
// (closePayload for another goroutine than the test's).
func readClose(c net.Conn, br *bufio.Reader) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(safety))
	for {
		f, err := edgetest.ReadFrame(br)
		if err != nil {
			return nil, err
		}
		if f.Op == 0x8 {
			return f.Payload, nil
		}
	}
}

// TestBadFramesClosed: every way a client can break the framing or send
// what the protocol has no place for closes its connection with the
// matching code — never a crash, never silence — and frees its slot; the
// node goes on serving others.
func TestBadFramesClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	addr := e.ts.Listener.Addr().String()
	big := bytes.Repeat([]byte("x"), defaultReadLimit+1)
	half := bytes.Repeat([]byte("x"), defaultReadLimit/2+1)
	tests := []struct {
		name   string
		frames [][]byte
		code   int
	}{
		{"oversized text", [][]byte{rawFrame(0x81, true, big)}, closeTooBig},
		{"oversized in fragments", [][]byte{rawFrame(0x01, true, half), rawFrame(0x80, true, half)}, closeTooBig},
		{"binary (msgpack or not)", [][]byte{rawFrame(0x82, true, []byte{0x81, 0xa1, 'v', 0x01})}, closeUnsupported},
		{"text, not JSON", [][]byte{rawFrame(0x81, true, []byte("hello"))}, closeBadData},
		{"text, bad UTF-8", [][]byte{rawFrame(0x81, true, []byte{'"', 0xff, '"'})}, closeBadData},
		{"report, a name in capitals", [][]byte{rawFrame(0x81, true, []byte(`{"DROPS":5}`))}, closeBadData},
		{"report, a counter twice", [][]byte{rawFrame(0x81, true, []byte(`{"drops":1,"drops":5}`))}, closeBadData},
		{"reserved opcode", [][]byte{rawFrame(0x83, true, nil)}, closeProtocol},
		{"reserved control opcode", [][]byte{rawFrame(0x8B, true, nil)}, closeProtocol},
		{"unmasked", [][]byte{rawFrame(0x81, false, []byte(`{}`))}, closeProtocol},
		{"RSV bit", [][]byte{rawFrame(0xC1, true, []byte(`{}`))}, closeProtocol},
		{"long ping", [][]byte{rawFrame(0x89, true, bytes.Repeat([]byte("p"), 126))}, closeProtocol},
		{"fragmented ping", [][]byte{rawFrame(0x09, true, []byte("p"))}, closeProtocol},
		{"continuation first", [][]byte{rawFrame(0x80, true, []byte(`{}`))}, closeProtocol},
		{"length past 2^62", [][]byte{{0x81, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}}, closeTooBig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, br := dialSending(t, addr, e.token("r1"), tt.frames...)
			if got := readCloseCode(t, c, br); got != tt.code {
				t.Fatalf("close code %d, want %d", got, tt.code)
			}
		})
	}
	waitFor(t, "every slot to free", func() bool { return e.srv.Load().Conns == 0 })
	// The node still serves.
	ws := e.connect("r1", "")
	id := e.append("r1", sys("still here"))[0].ID
	got, err := readUntil(ws, "r1", untilID(id))
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "after the bad frames", got, []string{id})
}

// TestDeflateOfferIgnored: a client offering permessage-deflate (every
// browser does) is upgraded without it — the answer names no extension —
// and served plain frames: the edge encodes a frame once for all its
// connections, so it compresses for none. A client that compresses anyway
// sends RSV1 and is closed 1002 (TestBadFramesClosed, "RSV bit").
func TestDeflateOfferIgnored(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := &websocket.Dialer{HandshakeTimeout: safety, EnableCompression: true}
	ws, resp, err := e.dialWith(d, e.token("r1"), "")
	if err != nil {
		t.Fatalf("dial offering permessage-deflate: %v", err)
	}
	defer ws.Close()
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
		t.Fatalf("the edge accepted extensions %q", ext)
	}
	waitFor(t, "the room's hub", func() bool { return e.srv.roomCount() == 1 })
	id := e.append("r1", gift(5000, 1))[0].ID
	got, err := readUntil(ws, "r1", func(ms []wire.Message) bool { return len(ms) > 0 })
	if err != nil || got[0].ID != id {
		t.Fatalf("read %+v, %v; want the gift %s in a plain frame", got, err, id)
	}
}

// TestEdgetestPath holds the test client's upgrade path to the server's:
// edgetest cannot import edge (edge's own tests import it).
func TestEdgetestPath(t *testing.T) {
	if edgetest.Path != Path {
		t.Fatalf("edgetest.Path = %q, edge.Path = %q", edgetest.Path, Path)
	}
}
