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
// load, and one room's viewers are many. Each worker counts what it wrote
// in a tally of its own, added to the metrics once at the end: per write,
// two atomic adds on counters every core touches would cost more than the
// rest of the edge's own work.
func (s *Server) fanOut(conns []*conn, fn func(*conn, *tally)) {
	n := len(conns)
	workers := min(runtime.GOMAXPROCS(0), n/fanChunk)
	if workers <= 1 {
		var t tally
		for _, c := range conns {
			fn(c, &t)
		}
		s.count(&t)
		return
	}
	per := (n + workers - 1) / workers
	tallies := make([]tally, workers)
	var wg sync.WaitGroup
	for w, lo := 1, per; lo < n; w, lo = w+1, lo+per {
		part, t := conns[lo:min(n, lo+per)], &tallies[w]
		wg.Go(func() {
			for _, c := range part {
				fn(c, t)
			}
		})
	}
	for _, c := range conns[:per] {
		fn(c, &tallies[0])
	}
	wg.Wait()
	for i := range tallies {
		s.count(&tallies[i])
	}
}

// tally is what one fan-out worker wrote. Padded to a cache line, so that
// workers' tallies side by side do not share one.
type tally struct {
	frames, msgs             int
	siteOffered, siteSkipped int
	_                        [32]byte
}

// count adds t to the metrics.
func (s *Server) count(t *tally) {
	if t.frames > 0 {
		s.m.framesSent.Add(float64(t.frames))
		s.m.messagesSent.Add(float64(t.msgs))
	}
	if t.siteOffered > 0 {
		s.m.siteOffered.Add(float64(t.siteOffered))
	}
	if t.siteSkipped > 0 {
		s.m.siteSkipped.Add(float64(t.siteSkipped))
	}
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
