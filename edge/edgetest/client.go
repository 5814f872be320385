// Package edgetest is a raw WebSocket client for the edge's tests and
// benchmarks: the upgrade handshake, masked client frames and unmasked
// server frames read byte by byte, so that a test can send what no
// well-behaved library would (bad frames, a handshake held open) and a
// benchmark holds many connections for little memory. It also samples the
// process's memory for the per-connection figures. Its functions are safe
// for concurrent use on different connections.
package edgetest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Path is where the edge accepts WebSocket upgrades.
const Path = "/v1/ws"

// handshakeReq builds the upgrade request.
func handshakeReq(addr, token string) string {
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	return "GET " + Path + " HTTP/1.1\r\nHost: " + addr + "\r\n" + auth +
		"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
}

// Dial does the handshake; it returns the status line's code on refusal.
func Dial(addr, token string) (net.Conn, *bufio.Reader, error) {
	return DialFrom(nil, addr, token)
}

// DialFrom is Dial from a local address (nil: any): a load spread over
// several 127.x sources, so that no source runs out of ephemeral ports.
func DialFrom(local net.Addr, addr, token string) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: local}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	br, err := Handshake(c, addr, token)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, br, nil
}

// Handshake upgrades c, a connection to addr (a plain socket, or a TLS
// one for a server that terminates TLS), within 10 s. The reader holds
// what the server sent past its 101. It leaves c open either way.
func Handshake(c net.Conn, addr, token string) (*bufio.Reader, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, handshakeReq(addr, token)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(c, 1024)
	status, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line == "\r\n" {
			break
		}
	}
	if !bytes.HasPrefix([]byte(status), []byte("HTTP/1.1 101")) {
		return nil, fmt.Errorf("handshake: %q", status)
	}
	_ = c.SetDeadline(time.Time{})
	return br, nil
}

// ClientFrame encodes a masked client frame.
func ClientFrame(op byte, payload []byte) []byte {
	if len(payload) > 125 {
		panic("edgetest: client frames are small")
	}
	b := []byte{0x80 | op, 0x80 | byte(len(payload)), 1, 2, 3, 4}
	for i, x := range payload {
		b = append(b, x^b[2+i%4])
	}
	return b
}

// Frame is a server frame as read by the client.
type Frame struct {
	Op      byte
	Payload []byte
}

// ReadFrame reads one unmasked server frame.
func ReadFrame(br *bufio.Reader) (Frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return Frame{}, err
	}
	if h[1]&0x80 != 0 {
		return Frame{}, errors.New("masked server frame")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return Frame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return Frame{}, err
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	if n > 1<<20 {
		return Frame{}, errors.New("frame too large")
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return Frame{}, err
	}
	return Frame{Op: h[0] & 0x0f, Payload: p}, nil
}
