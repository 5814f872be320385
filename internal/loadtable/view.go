package loadtable

import (
	"context"
	"slices"
	"strings"
	"time"
)

// A View reads its table whole every fullReadEvery even though the
// change log continues (a store that failed over may have lost writes
// behind a log that then went on, and a report pruned while a reader held
// it is otherwise never forgotten), after a failed read (a failover shows
// as errors first), and after a gap without a good read (the log may have
// been trimmed past the reader's position meanwhile): View.WholeAfterGap,
// DefaultWholeAfterGap unless set.
const (
	fullReadEvery        = 5 * time.Second
	DefaultWholeAfterGap = 100 * time.Millisecond
)

// View is one reader's copy of a load table, kept up to date by
// reading what changed (ChangeReader) rather than the whole table, for a
// reader that looks often: an allocator every 5 to 50 ms, an ingest every
// second. A table that is no ChangeReader is read whole each time. Not safe
// for concurrent use.
type View struct {
	// WholeAfterGap: a read this long after the last good one reads the
	// table whole. Zero: 100 ms, for a reader that looks every few
	// milliseconds and must not miss a removal (an allocator: at least
	// every 50 ms, so that a quiet one does not read whole every time). A reader that looks once a
	// second and can bear a missed entry for a few seconds (every live
	// node reports again within 250 ms) sets more.
	WholeAfterGap time.Duration
	// News judges whether l, a report read, is news against last, the
	// node's report the view held (SyncStats.News). Nil: News by the
	// default bounds.
	News func(l, last NodeLoad) bool

	table  Table
	cr     ChangeReader
	cursor []string
	nodes  map[string]NodeLoad
	sorted []NodeLoad
	dirty  bool      // sorted is to be rebuilt
	last   time.Time // of the last whole read
	good   time.Time // of the last good read
	heard  map[string]heard
}

// heard is a node's newest report as a View first read it: its At and the
// reader's time then (NodeLoad.Heard).
type heard struct{ at, heard time.Time }

// hear sets l.Heard: the time the view first read this report. A report
// read again (a whole read) keeps it. A node's first report is heard at
// now, or at its At when that is earlier — a dead node's report, read
// after a reader's start, must not look new; a live node whose clock is
// behind looks stale only until its next report (within 250 ms).
func (v *View) hear(l *NodeLoad, now time.Time) {
	h, ok := v.heard[l.ID]
	switch {
	case ok && h.at.Equal(l.At):
	case ok:
		h = heard{at: l.At, heard: now}
	default:
		h = heard{at: l.At, heard: now}
		if l.At.Before(now) {
			h.heard = l.At
		}
	}
	v.heard[l.ID] = h
	l.Heard = h.heard
}

// NewView returns a view of table that has read nothing yet.
func NewView(table Table) *View {
	v := &View{table: table, nodes: map[string]NodeLoad{}, heard: map[string]heard{}}
	v.cr, _ = table.(ChangeReader)
	return v
}

// SyncStats says what one Sync read.
type SyncStats struct {
	// Changed is how many reports and removals the read carried.
	Changed int
	// Bytes is about how many bytes of reports it carried.
	Bytes int
	// Full says the whole table was read.
	Full bool
	// Skipped counts records that did not decode.
	Skipped int
	// News is how many of the changes read would change an allocator's
	// decision: a node the view did not hold, a node removed (or gone from
	// a whole read), a report that is news against the node's report the
	// view held (View.News). Keep-alives, and whole reads of a table that
	// did not change, carry none.
	News int
}

// Sync brings the view up to date and returns every node's newest report,
// sorted by ID. The slice is the view's own: valid until the next Sync, not
// to be modified. On error the view keeps what it held.
func (v *View) Sync(ctx context.Context, now time.Time) ([]NodeLoad, SyncStats, error) {
	if v.cr == nil {
		loads, err := v.table.Snapshot(ctx)
		if err != nil {
			return nil, SyncStats{}, err
		}
		news, held := 0, 0
		for i := range loads {
			last, ok := v.nodes[loads[i].ID]
			if ok {
				held++
			}
			if !ok || v.news(loads[i], last) {
				news++
			}
			v.hear(&loads[i], now)
		}
		news += len(v.nodes) - held // held before, gone now
		clear(v.nodes)
		for _, l := range loads {
			v.nodes[l.ID] = l
		}
		v.forget(func(id string) bool { _, ok := slices.BinarySearchFunc(loads, id, byID); return ok })
		v.sorted = loads
		return loads, SyncStats{Changed: len(loads), Full: true, News: news}, nil
	}
	cursor := v.cursor
	gap := v.WholeAfterGap
	if gap <= 0 {
		gap = DefaultWholeAfterGap
	}
	full := cursor == nil || now.Sub(v.last) >= fullReadEvery || now.Sub(v.good) > gap
	if full {
		cursor = nil
	}
	ch, next, err := v.cr.Changes(ctx, cursor)
	if err != nil {
		v.cursor = nil
		return nil, SyncStats{}, err
	}
	if full {
		v.last = now
	}
	v.good = now
	v.cursor = next
	st := SyncStats{Changed: len(ch.Loads) + len(ch.Removed), Bytes: ch.Bytes, Full: full, Skipped: ch.Skipped}
	var gone map[string]NodeLoad // held in a shard read whole, not yet read again
	if len(ch.Reset) > 0 {
		reset := make([]bool, v.cr.Shards())
		for _, k := range ch.Reset {
			reset[k] = true
		}
		for id, l := range v.nodes {
			if reset[ch.ShardOf(id)] {
				if gone == nil {
					gone = map[string]NodeLoad{}
				}
				gone[id] = l // news only if the whole read lacks it or changed it
				delete(v.nodes, id)
				v.dirty = true
			}
		}
	}
	for _, id := range ch.Removed {
		if _, ok := v.nodes[id]; ok {
			delete(v.nodes, id)
			v.dirty = true
			st.News++
		}
	}
	for _, l := range ch.Loads {
		last, ok := v.nodes[l.ID]
		if !ok {
			v.dirty = true
			if last, ok = gone[l.ID]; ok {
				delete(gone, l.ID)
			}
		}
		if !ok || v.news(l, last) {
			st.News++
		}
		v.hear(&l, now)
		v.nodes[l.ID] = l
	}
	st.News += len(gone)
	if v.dirty {
		v.forget(func(id string) bool { _, ok := v.nodes[id]; return ok })
	}
	if v.dirty || len(ch.Loads) > 0 {
		v.rebuild()
	}
	return v.sorted, st, nil
}

// news judges l against last (View.News).
func (v *View) news(l, last NodeLoad) bool {
	if v.News != nil {
		return v.News(l, last)
	}
	return News(l, last, DefaultOverload, DefaultMaxCPU)
}

// forget drops what the view heard of nodes it no longer holds.
func (v *View) forget(holds func(id string) bool) {
	for id := range v.heard {
		if !holds(id) {
			delete(v.heard, id)
		}
	}
}

func byID(l NodeLoad, id string) int { return strings.Compare(l.ID, id) }

// rebuild refreshes sorted from nodes: in place when the set of nodes is
// the same (the common case: loads changed, nobody came or went), sorted
// again otherwise.
func (v *View) rebuild() {
	if !v.dirty {
		for i := range v.sorted {
			v.sorted[i] = v.nodes[v.sorted[i].ID]
		}
		return
	}
	v.sorted = v.sorted[:0]
	for _, l := range v.nodes {
		v.sorted = append(v.sorted, l)
	}
	sortLoads(v.sorted)
	v.dirty = false
}
