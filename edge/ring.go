package edge

import (
	"danmaku/sdk/wire"
)

// msgID is a parsed stream entry id; comparing two of them is cheap, unlike
// comparing the strings.
type msgID struct {
	ms  int64
	seq uint64
}

func parseMsgID(s string) (msgID, error) {
	ms, seq, err := wire.ParseID(s)
	return msgID{ms, seq}, err
}

func (a msgID) less(b msgID) bool {
	return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq)
}

func (a msgID) String() string { return wire.FormatID(a.ms, a.seq) }

func minID(a, b msgID) msgID {
	if b.less(a) {
		return b
	}
	return a
}

// entry is one pushable message, already slimmed, with its parsed id.
type entry struct {
	id  msgID
	msg wire.Message
}

// ring keeps the newest pushable messages of a room in id order, evicting
// the oldest when full. It grows up to its size as messages come, so that a
// quiet room costs nothing. Not safe for concurrent use; the hub lock
// guards it.
type ring struct {
	buf  []entry
	size int
	head int // index of the oldest entry once buf is full
}

func newRing(size int) ring { return ring{size: size} }

// at returns the i-th oldest entry.
func (r *ring) at(i int) *entry { return &r.buf[(r.head+i)%len(r.buf)] }

// push appends e, returning the evicted oldest entry when the ring was full.
func (r *ring) push(e entry) (evicted entry, ok bool) {
	if len(r.buf) < r.size {
		r.buf = append(r.buf, e)
		return entry{}, false
	}
	evicted = r.buf[r.head]
	r.buf[r.head] = e
	r.head = (r.head + 1) % len(r.buf)
	return evicted, true
}

// after returns the index of the oldest entry with an id above id (len()
// when there is none).
func (r *ring) after(id msgID) int {
	lo, hi := 0, len(r.buf)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if id.less(r.at(m).id) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// slice copies the messages of entries [i, j).
func (r *ring) slice(i, j int) []wire.Message {
	if i >= j {
		return nil
	}
	out := make([]wire.Message, 0, j-i)
	for k := i; k < j; k++ {
		out = append(out, r.at(k).msg)
	}
	return out
}
