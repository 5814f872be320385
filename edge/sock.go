package edge

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// A sock is one upgraded client socket: how frames leave, and how the
// connection ends. There are two kinds:
//
//   - pollSock (Linux, plain TCP): the socket is taken out of Go's
//     netpoller and owned by one of the server's epoll loops. An idle
//     connection has no goroutine and no buffer; frames are written by
//     whoever sends them (the room's flusher) straight to the socket,
//     and only what the socket does not take is kept (references to
//     the shared frames), flushed with one writev when it drains.
//   - goSock (TLS, other systems, wrapped listeners): a reader and a
//     writer goroutine per connection, as a TLS record layer needs a
//     blocking net.Conn. With TLS a connection costs ~20 KiB (stacks and
//     the TLS state) against ~0.6 KiB on a loop (see the README).
//
// Either way the connection's logic (conn) sees only send, closeWith and
// its onFrame/gone callbacks.
type sock interface {
	// begin starts reading the client, once the connection holds the
	// socket (so that what the client sent with its handshake, a ping
	// say, can be answered).
	begin()
	// send writes frame (a whole encoded WebSocket frame, shared and
	// never modified) or queues it behind what the socket has not taken
	// (sendOK). It refuses the frame when max frames are waiting already
	// (sendFull), or once the socket is closing (sendClosed).
	send(frame []byte, max int) int
	// closeWith sends a close frame with code (0: none) and closes: after
	// the client's answer, so that the client holds the TIME_WAIT, or
	// after closeGrace. Later calls do nothing.
	closeWith(code int, text string)
}

// sockOwner is what a socket serves: a connection (conn), or a browser's
// socket waiting for its hello (helloWait).
type sockOwner interface {
	// touched marks that the client sent something, and returns the
	// largest frame it may send.
	touched() int64
	// onFrame handles a whole frame (close frames are the socket's);
	// false: read no more (kicked, or handed off).
	onFrame(f clientFrame) bool
	// kick closes with code (0: without a close frame).
	kick(code int, text string) bool
	// finish runs once the socket is closed.
	finish()
}

// Pre-encoded server frames.
var (
	pingFrame = serverFrame(ws.OpPing, nil)
)

// serverFrame encodes one unmasked, unfragmented server frame.
func serverFrame(op ws.OpCode, payload []byte) []byte {
	var hdr [10]byte
	hdr[0] = 0x80 | byte(op)
	n := 2
	switch l := len(payload); {
	case l <= 125:
		hdr[1] = byte(l)
	case l <= 0xFFFF:
		hdr[1] = 126
		binary.BigEndian.PutUint16(hdr[2:], uint16(l))
		n = 4
	default:
		hdr[1] = 127
		binary.BigEndian.PutUint64(hdr[2:], uint64(l))
		n = 10
	}
	b := make([]byte, n+len(payload))
	copy(b, hdr[:n])
	copy(b[n:], payload)
	return b
}

// closeFrame encodes a close frame; the text is cut to fit a control frame.
func closeFrame(code int, text string) []byte {
	if len(text) > 120 {
		text = text[:120]
	}
	p := make([]byte, 2+len(text))
	binary.BigEndian.PutUint16(p, uint16(code))
	copy(p[2:], text)
	return serverFrame(ws.OpClose, p)
}

// Close codes of the protocol itself (RFC 6455).
const (
	closeProtocol    = 1002
	closeUnsupported = 1003
	closeBadData     = 1007
	closeTooBig      = 1009
)

// errFrameTooBig and errFrameBad end a connection whose client broke the
// framing; their close codes are closeTooBig and closeProtocol.
var (
	errFrameTooBig = errors.New("edge: client frame too large")
	errFrameBad    = errors.New("edge: bad client frame")
)

// clientFrame is one whole frame read from a client, unmasked.
type clientFrame struct {
	op      ws.OpCode
	fin     bool
	payload []byte
}

// clientHeader is a client frame's header: the frame is size bytes, the
// payload the last length of them.
type clientHeader struct {
	op     ws.OpCode
	fin    bool
	length int64
	size   int64
}

// parseClientHeader reads the header at the front of data; ok is false
// when data holds only part of it. Client frames must be masked (RFC 6455
// 5.1), control frames short and final, and none longer than limit — all
// checked on the header alone, so an oversized frame is refused before
// any of its payload is buffered.
func parseClientHeader(data []byte, limit int64) (h clientHeader, ok bool, err error) {
	if len(data) < 2 {
		return h, false, nil
	}
	b0, b1 := data[0], data[1]
	h.fin = b0&0x80 != 0
	h.op = ws.OpCode(b0 & 0x0F)
	if b0&0x70 != 0 || b1&0x80 == 0 { // no extension was negotiated; unmasked
		return h, false, errFrameBad
	}
	hl := int64(2)
	h.length = int64(b1 & 0x7F)
	switch h.length {
	case 126:
		if len(data) < 4 {
			return h, false, nil
		}
		h.length, hl = int64(binary.BigEndian.Uint16(data[2:])), 4
	case 127:
		if len(data) < 10 {
			return h, false, nil
		}
		u := binary.BigEndian.Uint64(data[2:])
		if u > 1<<62 {
			return h, false, errFrameTooBig
		}
		h.length, hl = int64(u), 10
	}
	if h.op.IsControl() && (h.length > 125 || !h.fin) || h.op.IsReserved() {
		return h, false, errFrameBad
	}
	if h.length > limit {
		return h, false, errFrameTooBig
	}
	h.size = hl + 4 + h.length
	return h, true, nil
}

// headerSize is how many bytes a masked header whose second byte is b1
// takes, mask included.
func headerSize(b1 byte) int {
	n := 2 + 4
	switch b1 & 0x7F {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	return n
}

// parseClientFrame reads one frame from the front of data (see
// parseClientHeader): the frame and the bytes it took; n == 0 when data
// holds only part of a frame. The payload is unmasked in place.
func parseClientFrame(data []byte, limit int64) (f clientFrame, n int, err error) {
	h, ok, err := parseClientHeader(data, limit)
	if err != nil || !ok || int64(len(data)) < h.size {
		return f, 0, err
	}
	return unmask(data[:h.size], h), int(h.size), nil
}

// unmask returns the frame in b (exactly one whole frame), its payload
// unmasked in place.
func unmask(b []byte, h clientHeader) clientFrame {
	start := len(b) - int(h.length)
	var mask [4]byte
	copy(mask[:], b[start-4:start])
	p := b[start:]
	ws.Cipher(p, mask, 0)
	return clientFrame{op: h.op, fin: h.fin, payload: p}
}

// frameErrCode is the close code for a framing error; 0 for any other
// error (the socket failed: nothing can be sent).
func frameErrCode(err error) int {
	switch {
	case errors.Is(err, errFrameTooBig):
		return closeTooBig
	case errors.Is(err, errFrameBad):
		return closeProtocol
	}
	return 0
}

// readClientFrame reads one whole frame from r (a goSock's reader, or a
// handshake's before the socket goes to a loop).
func readClientFrame(r *bufio.Reader, limit int64) (clientFrame, error) {
	b, err := r.Peek(2)
	if err != nil {
		return clientFrame{}, err
	}
	if b[1]&0x80 == 0 {
		return clientFrame{}, errFrameBad // unmasked: refused before reading on
	}
	head, err := r.Peek(headerSize(b[1]))
	if err != nil {
		return clientFrame{}, err
	}
	h, ok, err := parseClientHeader(head, limit)
	if err != nil {
		return clientFrame{}, err
	}
	if !ok {
		return clientFrame{}, errFrameBad // cannot happen: head is a whole header
	}
	buf := make([]byte, h.size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return clientFrame{}, err
	}
	return unmask(buf, h), nil
}

// readClientMessage reads one whole message from r, joining fragments
// (control frames between them are skipped), within limit in all.
func readClientMessage(r *bufio.Reader, limit int64) (clientFrame, error) {
	f, err := readClientFrame(r, limit)
	for err == nil && f.op.IsControl() && f.op != ws.OpClose {
		f, err = readClientFrame(r, limit)
	}
	if err != nil || f.fin || f.op == ws.OpClose {
		return f, err
	}
	msg := f
	msg.payload = append([]byte(nil), f.payload...)
	for !msg.fin {
		f, err = readClientFrame(r, limit)
		switch {
		case err != nil:
			return clientFrame{}, err
		case f.op.IsControl():
			continue
		case f.op != ws.OpContinuation:
			return clientFrame{}, errFrameBad
		case int64(len(msg.payload)+len(f.payload)) > limit:
			return clientFrame{}, errFrameTooBig
		}
		msg.payload = append(msg.payload, f.payload...)
		msg.fin = f.fin
	}
	return msg, nil
}

// writeAll writes frames to nc with one deadline: the catch-up of a
// connection, written before its socket goes to a loop or a writer.
func writeAll(nc net.Conn, timeout time.Duration, frames ...[]byte) error {
	_ = nc.SetWriteDeadline(time.Now().Add(timeout))
	var err error
	if len(frames) == 1 {
		_, err = nc.Write(frames[0])
	} else {
		bufs := net.Buffers(append([][]byte(nil), frames...)) // WriteTo consumes it
		_, err = bufs.WriteTo(nc)
	}
	_ = nc.SetWriteDeadline(time.Time{})
	return err
}

// echoClose is the answer to a client's close frame (RFC 6455 5.5.1,
// 7.4): none for none; the client's code when a peer may send it; 1002
// for a payload of one byte or a code no peer may send (below 1000,
// 1004-1006, 1015-2999, 5000 and above: reserved, or meant never to
// travel); 1007 for a reason that is not UTF-8.
func echoClose(payload []byte) []byte {
	switch {
	case len(payload) == 0:
		return serverFrame(ws.OpClose, nil)
	case len(payload) == 1:
		return closeFrame(closeProtocol, "one-byte close payload")
	}
	code := int(binary.BigEndian.Uint16(payload))
	switch {
	case !sendableCloseCode(code):
		return closeFrame(closeProtocol, "invalid close code")
	case !utf8.Valid(payload[2:]):
		return closeFrame(closeBadData, "close reason not UTF-8")
	}
	return closeFrame(code, "")
}

// sendableCloseCode reports whether a peer may put code in a close frame:
// the codes of RFC 6455 and the IANA registry (1000-1003, 1007-1014) and
// those left to libraries and applications (3000-4999).
func sendableCloseCode(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}
