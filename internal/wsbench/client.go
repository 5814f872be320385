package wsbench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// PayloadSize is the size of a broadcast message (~a room window's frame).
const PayloadSize = 200

// NewPayload makes a broadcast payload stamped with seq and the time now.
func NewPayload(seq int) []byte {
	p := make([]byte, PayloadSize)
	binary.BigEndian.PutUint64(p[0:], uint64(seq))
	binary.BigEndian.PutUint64(p[8:], uint64(time.Now().UnixNano()))
	for i := 16; i < len(p); i++ {
		p[i] = byte(i)
	}
	return p
}

// ClientConfig drives the load client.
type ClientConfig struct {
	Addr       string
	Conns      int
	Broadcasts int           // binary messages each connection waits for
	Timeout    time.Duration // for the whole run after Ready
	Ready      func()        // called once every connection did its handshake and got its pong
	Start      <-chan struct{}
}

// ClientResult is what the client measured.
type ClientResult struct {
	Conns      int     `json:"conns"`
	Deliveries int64   `json:"deliveries"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	Maxms      float64 `json:"max_ms"`
	Errors     int64   `json:"errors"`
}

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
		panic("wsbench: client frames are small")
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

// RunClient opens cfg.Conns connections; each sends a text frame and a
// ping and waits for its pong; then Ready is called; after Start closes,
// each connection reads until it got cfg.Broadcasts binary messages,
// recording latency from the stamp in the payload.
func RunClient(cfg ClientConfig) (ClientResult, error) {
	type cl struct {
		c  net.Conn
		br *bufio.Reader
	}
	conns := make([]cl, cfg.Conns)
	var (
		mu      sync.Mutex
		firstEr error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, 64)
	)
	hello := append(ClientFrame(0x1, []byte(`{"t":"hello"}`)), ClientFrame(0x9, []byte("p"))...)
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, br, err := Dial(cfg.Addr, "tok")
			if err == nil {
				_, err = c.Write(hello)
			}
			for err == nil {
				var f Frame
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				if f, err = ReadFrame(br); err == nil && f.Op == 0xA {
					break
				}
			}
			if err != nil {
				mu.Lock()
				firstEr = cmpOr(firstEr, fmt.Errorf("conn %d: %w", i, err))
				mu.Unlock()
				if c != nil {
					c.Close()
				}
				return
			}
			_ = c.SetReadDeadline(time.Time{})
			conns[i] = cl{c, br}
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c.c != nil {
				c.c.Close()
			}
		}
	}()
	if firstEr != nil {
		return ClientResult{}, firstEr
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	if cfg.Start != nil {
		<-cfg.Start
	}
	var errs atomic.Int64
	lats := make([][]int64, len(conns))
	deadline := time.Now().Add(cfg.Timeout)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]int64, 0, cfg.Broadcasts)
			_ = c.c.SetReadDeadline(deadline)
			for len(l) < cfg.Broadcasts {
				f, err := ReadFrame(c.br)
				if err != nil {
					errs.Add(1)
					break
				}
				if f.Op == 0x2 && len(f.Payload) >= 16 {
					sent := int64(binary.BigEndian.Uint64(f.Payload[8:]))
					l = append(l, time.Now().UnixNano()-sent)
				}
			}
			lats[i] = l
		}()
	}
	wg.Wait()
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := ClientResult{Conns: len(conns), Deliveries: int64(len(all)), Errors: errs.Load()}
	if len(all) > 0 {
		q := func(p float64) float64 { return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e6 }
		r.P50ms, r.P99ms, r.Maxms = q(0.50), q(0.99), float64(all[len(all)-1])/1e6
	}
	return r, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
