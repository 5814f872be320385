package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds a proxy's dial of one backend: loopback answers at
// once or refuses, so a second is only a guard.
const dialTimeout = time.Second

// Proxy is a TCP proxy on a loopback port in front of one or more
// backends. With several, each new connection goes to the next backend in
// turn, skipping one that refuses it: a load balancer in front of the
// gslbs, as DNS or an L4 balancer is in a deployment. Cut makes it a
// partition: every open connection is closed and new ones are accepted
// and then held without a byte through until Restore (calls hang until
// their own deadlines, as with lost packets).
type Proxy struct {
	ln       net.Listener
	backends []string

	mu    sync.Mutex
	next  int
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 on a free port and forwards to backends.
func NewProxy(backends ...string) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("faults: proxy: no backend")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the proxy's "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection and holds new ones until Restore.
func (p *Proxy) Cut() { p.setCut(true) }

// Restore lets connections through again; the held ones are closed, so
// that their clients dial again.
func (p *Proxy) Restore() { p.setCut(false) }

// setCut sets the cut and closes every open connection: through ones on
// Cut, held ones on Restore.
func (p *Proxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection; it waits for its
// goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.handle(c) })
	}
}

// track adds c to the open connections, unless the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) (cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return p.cut
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
	p.mu.Unlock()
}

func (p *Proxy) handle(c net.Conn) {
	if p.track(c) {
		// Held: read and discard until Restore or Close closes it.
		_, _ = io.Copy(io.Discard, c)
		p.untrack(c)
		return
	}
	b, err := p.dial()
	if err != nil {
		p.untrack(c)
		return
	}
	if p.track(b) {
		p.untrack(c, b)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done
	p.untrack(c, b)
	<-done
}

// dial connects to the next backend that answers, starting from the one
// after the last used.
func (p *Proxy) dial() (net.Conn, error) {
	p.mu.Lock()
	start := p.next
	p.next = (p.next + 1) % len(p.backends)
	p.mu.Unlock()
	var last error
	for i := range p.backends {
		b, err := net.DialTimeout("tcp", p.backends[(start+i)%len(p.backends)], dialTimeout)
		if err == nil {
			return b, nil
		}
		last = err
	}
	return nil, last
}
