package edge

import (
	"runtime"
	"sync"
)

// fanChunk is the fewest connections worth a goroutine of their own in a
// fan-out: below it, starting one costs more than the writes it shares.
const fanChunk = 256

// fanOut calls fn for every connection, spread over the cores: each call
// writes to a socket (a syscall), which is most of an edge's CPU under
// load, and one room's viewers are many.
func (s *Server) fanOut(conns []*conn, fn func(*conn)) {
	n := len(conns)
	workers := min(runtime.GOMAXPROCS(0), n/fanChunk)
	if workers <= 1 {
		for _, c := range conns {
			fn(c)
		}
		return
	}
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := per; lo < n; lo += per {
		part := conns[lo:min(n, lo+per)]
		wg.Go(func() {
			for _, c := range part {
				fn(c)
			}
		})
	}
	for _, c := range conns[:per] {
		fn(c)
	}
	wg.Wait()
}

// connBufs recycles the connection snapshots of fan-outs: a room of 100k
// viewers would otherwise allocate 800 KB per frame.
type connBufs struct{ p sync.Pool }

// get returns a copy of src.
func (b *connBufs) get(src []*conn) []*conn {
	var dst []*conn
	if v, ok := b.p.Get().(*[]*conn); ok {
		dst = (*v)[:0]
	}
	return append(dst, src...)
}

// put gives back a slice from get; it must not be used afterwards.
func (b *connBufs) put(s []*conn) {
	clear(s) // no pointer to a closed connection stays reachable
	s = s[:0]
	b.p.Put(&s)
}
