package edge

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/vmihailenco/msgpack/v5"

	"danmaku/sdk/wire"
)

// BenchmarkFanout pushes b.N messages into one room with N connections over
// loopback and reports the process CPU time per delivered message
// (cpu-ns/delivery; one delivery is one message reaching one connection).
// The in-process clients only read and count, so the figure is an upper
// bound of the server's cost. ns/op is wall time per message and includes
// waiting for the slowest client; look at cpu-ns/delivery.
//
//	go test -run '^$' -bench Fanout -benchtime 2000x ./edge/
func BenchmarkFanout(b *testing.B) {
	for _, conns := range []int{100, 1000} {
		for _, perFrame := range []int{1, 16} {
			b.Run(fmt.Sprintf("conns=%d/perframe=%d", conns, perFrame), func(b *testing.B) {
				benchFanout(b, conns, perFrame)
			})
		}
	}
}

func benchFanout(b *testing.B, conns, perFrame int) {
	e := newEnv(b, envOpts{cfg: func(c *Config) { c.QueueSize = 1024 }})
	// Below what New accepts, so that the benchmark measures CPU rather
	// than sleeping through merge windows; no hub has started yet.
	e.srv.cfg.MergeWindow = time.Millisecond

	var delivered, want atomic.Int64
	reached := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for range conns {
		ws := e.connect("r1", "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			countMessages(ws, func(n int) {
				if delivered.Add(int64(n)) == want.Load() {
					reached <- struct{}{}
				}
			})
		}()
	}
	msgs := make([]wire.Message, perFrame)
	for i := range msgs {
		msgs[i] = gift(500, 1)
	}

	b.ResetTimer()
	cpu0 := cpuTime()
	for sent := 0; sent < b.N; {
		k := min(perFrame, b.N-sent)
		sent += k
		want.Store(int64(sent * conns))
		e.append("r1", msgs[:k]...)
		select {
		case <-reached:
		case <-time.After(safety):
			b.Fatalf("delivered %d of %d", delivered.Load(), want.Load())
		}
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*conns), "cpu-ns/delivery")
	if d := counter(e.srv.m.slow); d != 0 {
		b.Fatalf("%v slow disconnects", d)
	}
	e.srv.cfg.DrainPeriod = time.Millisecond
}

// countMessages reads frames until the connection ends and reports how many
// messages each holds, decoding only the frame's header.
func countMessages(ws *websocket.Conn, add func(int)) {
	var r bytes.Reader
	dec := msgpack.NewDecoder(&r)
	for {
		_, rd, err := ws.NextReader()
		if err != nil {
			return
		}
		b, err := io.ReadAll(rd)
		if err != nil {
			return
		}
		r.Reset(b)
		dec.Reset(&r)
		n, err := frameLen(dec)
		if err != nil {
			return
		}
		add(n)
	}
}

func frameLen(dec *msgpack.Decoder) (int, error) {
	keys, err := dec.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	for range keys {
		k, err := dec.DecodeString()
		if err != nil {
			return 0, err
		}
		if k == "m" {
			return dec.DecodeArrayLen()
		}
		if err := dec.Skip(); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("frame without messages")
}

// BenchmarkIdleConnMemory opens idle connections and reports the Go heap
// and stack they take, per connection (bytes/conn). The clients are bare
// sockets that only did the handshake, so nearly all of it is the server's.
//
//	go test -run '^$' -bench IdleConnMemory -benchtime 1x ./edge/
func BenchmarkIdleConnMemory(b *testing.B) {
	const n = 2000
	for range b.N {
		b.StopTimer()
		// One token for every connection: admission is not what is
		// measured here.
		e := newEnv(b, envOpts{cfg: func(c *Config) { c.DrainPeriod, c.MaxConnsPerUser, c.ConnectRate = time.Millisecond, -1, -1 }})
		tok := e.token("r1")
		before := inUse()
		b.StartTimer()
		conns := make([]net.Conn, 0, n)
		for range n {
			c, err := rawHandshake(e.ts.Listener.Addr().String(), tok)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		waitFor(b, "every connection", func() bool { return e.srv.Load().Conns == n })
		b.StopTimer()
		b.ReportMetric(float64(inUse()-before)/n, "bytes/conn")
		for _, c := range conns {
			c.Close()
		}
	}
}

func inUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// rawHandshake does a WebSocket handshake on a bare socket and keeps
// nothing else.
func rawHandshake(addr, tok string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := "GET " + Path + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + tok +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	buf := make([]byte, 512)
	got := 0
	for !bytes.Contains(buf[:got], []byte("\r\n\r\n")) {
		k, err := c.Read(buf[got:])
		if err != nil {
			c.Close()
			return nil, err
		}
		got += k
	}
	if !bytes.HasPrefix(buf, []byte("HTTP/1.1 101")) {
		c.Close()
		return nil, fmt.Errorf("handshake: %q", buf[:got])
	}
	return c, nil
}
