// Package breakertest gives outage tests a TCP proxy in front of a real
// server (Redis, versitygw) that can cut the path without a trace: calls
// then hang until their deadline, as they do when a server is paused or a
// network drops packets — the outage a breaker and every call's deadline
// are for. (Stopping the server instead refuses connections at once, the
// easy case.) A Proxy is safe for concurrent use.
package breakertest

import (
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a target until Cut.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // every open connection, both sides
	wg    sync.WaitGroup
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target
// (host:port). It is closed, with every connection, when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("breakertest: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address (host:port), to give clients instead of the
// target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut stops every byte from passing, either way, on the connections open
// now and on those accepted from now on (the connection is accepted and
// nothing answers): calls hang until their deadline.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Restore ends the cut: the connections that lived through it are closed
// (their bytes were lost, as a partition's sessions are reset), and new
// ones are forwarded again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track adds conns to the open set, which Restore and close close.
func (p *Proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

// untrack closes conns and forgets them.
func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.track(client)
	if p.isCut() {
		return // held: Restore or close closes it
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.track(server)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
}

// pipe copies from src to dst until either closes; what it reads while
// the proxy is cut is dropped.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.untrack(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isCut() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// OutageEnv names the environment variable that sets how long outage tests
// keep a dependency away (a Go duration, e.g. "10s"); unset, each test's
// short default applies.
const OutageEnv = "DANMAKU_OUTAGE"

// Outage returns how long t's outage lasts: OutageEnv, else def.
func Outage(t testing.TB, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(OutageEnv)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("breakertest: %s=%q is not a positive duration", OutageEnv, v)
	}
	return d
}
