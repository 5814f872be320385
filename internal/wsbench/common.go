// Package wsbench measures candidate WebSocket servers for the edge: the
// goroutine-per-connection baseline (gorilla/websocket, as the edge ran
// before its event loop), lesismal/nbio's event loop, and gobwas/ws over a hand-written
// epoll loop. Each candidate behaves the same way: GET /v1/ws upgraded when
// it carries a non-empty bearer token, every connection in one room,
// binary frames encoded once and broadcast to the room, client pings
// answered, client text frames read and discarded, a server ping every
// PingInterval, a connection that falls behind closed with CloseResume.
//
// The benchmarks (bench_test.go) run the client in a child process so the
// server process can hold ~19k sockets; see README.md.
package wsbench

import (
	"encoding/binary"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Path is where the candidates accept WebSocket upgrades.
const Path = "/v1/ws"

// Close codes, as in the edge.
const (
	CloseResume = 4001 // fell behind: reconnect with last id
)

// Defaults mirroring the edge's configuration.
const (
	DefaultPingInterval = 30 * time.Second
	DefaultPongGrace    = 10 * time.Second
	DefaultQueueSize    = 64
	ReadLimit           = 4 << 10
)

// Options are the behaviour knobs every candidate honours.
type Options struct {
	PingInterval time.Duration // 0: DefaultPingInterval
	PongGrace    time.Duration // 0: DefaultPongGrace
	QueueSize    int           // frames a connection may have pending; 0: DefaultQueueSize
}

func (o Options) withDefaults() Options {
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.PongGrace <= 0 {
		o.PongGrace = DefaultPongGrace
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	return o
}

// Server is one candidate.
type Server interface {
	// Addr is the listening address (host:port).
	Addr() string
	// Broadcast writes payload as one binary message to every connection
	// of the room. The frame is encoded once.
	Broadcast(payload []byte)
	// Conns is how many connections are registered in the room.
	Conns() int
	// Close stops the server and closes every connection.
	Close() error
}

// Candidate names and constructors, in report order.
var Candidates = []struct {
	Name string
	New  func(Options) (Server, error)
}{
	{"gorilla", NewGorilla},
	{"nbio", NewNbio},
	{"gobwas-epoll", NewEpoll},
}

// authorized reports whether the request carries a non-empty bearer token.
func authorized(h string) bool {
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return ok && strings.TrimSpace(tok) != ""
}

func rejectHTTP(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return true
	}
	if !authorized(r.Header.Get("Authorization")) {
		http.Error(w, "missing bearer token", http.StatusUnauthorized)
		return true
	}
	return false
}

// serverFrame encodes an unmasked, final server frame with opcode op.
func serverFrame(op byte, payload []byte) []byte {
	n := len(payload)
	var b []byte
	switch {
	case n < 126:
		b = make([]byte, 2, 2+n)
		b[1] = byte(n)
	case n <= 0xffff:
		b = make([]byte, 4, 4+n)
		b[1] = 126
		binary.BigEndian.PutUint16(b[2:], uint16(n))
	default:
		b = make([]byte, 10, 10+n)
		b[1] = 127
		binary.BigEndian.PutUint64(b[2:], uint64(n))
	}
	b[0] = 0x80 | op
	return append(b, payload...)
}

// room is a registry of connections; broadcasts iterate over a snapshot.
type room[C comparable] struct {
	mu     sync.RWMutex
	conns  map[C]struct{}
	snap   []C // reused by snapshot; guarded by snapMu
	snapMu sync.Mutex
}

func newRoom[C comparable]() *room[C] { return &room[C]{conns: make(map[C]struct{})} }

func (r *room[C]) add(c C)    { r.mu.Lock(); r.conns[c] = struct{}{}; r.mu.Unlock() }
func (r *room[C]) remove(c C) { r.mu.Lock(); delete(r.conns, c); r.mu.Unlock() }
func (r *room[C]) len() int   { r.mu.RLock(); defer r.mu.RUnlock(); return len(r.conns) }

// each calls f for every connection, split across GOMAXPROCS goroutines so
// that the fan-out's syscalls use every CPU (the edge's writers do too).
func (r *room[C]) each(f func(C)) {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	r.mu.RLock()
	s := r.snap[:0]
	for c := range r.conns {
		s = append(s, c)
	}
	r.mu.RUnlock()
	r.snap = s
	fanout(len(s), func(i int) { f(s[i]) })
	clear(s)
}

func fanout(n int, f func(i int)) {
	w := runtime.GOMAXPROCS(0)
	if n < 256 || w == 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	per := (n + w - 1) / w
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				f(i)
			}
		}()
	}
	wg.Wait()
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
