package gslb

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// NodeKind says which role a node plays.
type NodeKind string

const (
	// KindIngest is a stateless upload node.
	KindIngest NodeKind = "ingest"
	// KindEdge is a WebSocket node.
	KindEdge NodeKind = "edge"
)

// NodeLoad is one node's load report. Nodes report every few milliseconds;
// the table keeps the newest report per node id.
type NodeLoad struct {
	// ID identifies the node; unique across the cluster.
	ID string `json:"id"`
	// Kind is the node's role.
	Kind NodeKind `json:"kind"`
	// Addr is the address clients are handed (an http:// or ws:// URL).
	Addr string `json:"addr"`
	// Line is the ISP line the address serves; "" is BGP (reachable from
	// every line). It holds no "|".
	Line string `json:"line,omitempty"`
	// Region is where the node stands (the operator's region names, as the
	// line classifier's); "" is unknown. It holds no "|".
	Region string `json:"region,omitempty"`
	// Conns is the current number of connections (edge) or in-flight
	// requests (ingest).
	Conns int `json:"conns"`
	// Capacity is the number of connections the node accepts; 0 means
	// unlimited.
	Capacity int `json:"cap"`
	// CPU is the node's CPU use, 0..1.
	CPU float64 `json:"cpu"`
	// Draining marks a node that takes no new clients (lame duck).
	Draining bool `json:"draining,omitempty"`
	// At is when the report was made, by the reporter's clock; tables keep
	// it to the millisecond.
	At time.Time `json:"at"`
}

// LoadTable is where nodes report their load and allocators read it. The
// Redis implementation spreads the reports over shards (hashes in slots of
// their own) with a change log each, the memory one keeps a map; both are
// also ChangeReaders, so that an allocator's sync reads what changed rather
// than the whole table.
type LoadTable interface {
	Report(ctx context.Context, l NodeLoad) error
	// Snapshot returns every node's newest report, sorted by ID.
	Snapshot(ctx context.Context) ([]NodeLoad, error)
	// Remove forgets a node (clean shutdown).
	Remove(ctx context.Context, id string) error
}

// ChangeReader is a LoadTable that can say what changed since a reader's
// last look. A cursor holds one position per shard; a nil cursor (a new
// reader) reads every shard whole.
type ChangeReader interface {
	LoadTable
	// Shards is how many shards the reports are spread over: the length of
	// a cursor.
	Shards() int
	// Changes returns what was reported or removed after cursor and the
	// cursor after it. cursor is not modified; its positions mean nothing
	// to the caller.
	Changes(ctx context.Context, cursor []string) (Changes, []string, error)
}

// Changes is what a ChangeReader returns.
type Changes struct {
	// Reset lists the shards read whole: a reader drops what it held of
	// them before taking Loads. A shard is read whole for a new reader,
	// and when its log no longer continues the reader's position (the
	// store restarted or failed over).
	Reset []int
	// Loads are the reports written since the cursor (every report of a
	// reset shard), newest per node.
	Loads []NodeLoad
	// Removed are the nodes removed since the cursor.
	Removed []string
	// Bytes is about how many bytes of reports the read carried, for the
	// sync metrics.
	Bytes int
	// Skipped counts records that did not decode (a newer or broken
	// reporter): left out, so that one bad record does not blind every
	// allocator.
	Skipped int
	// ShardOf maps each of Loads and Removed to its shard, by node id.
	ShardOf func(id string) int
}

// ErrNoID is returned by Report for a report without a node id.
var ErrNoID = errors.New("gslb: load report without node id")

var (
	_ LoadTable    = (*MemoryLoadTable)(nil)
	_ ChangeReader = (*MemoryLoadTable)(nil)
)

// MemoryLoadTable is the in-process LoadTable: one shard, whose log is a
// sequence number per node.
type MemoryLoadTable struct {
	mu     sync.Mutex
	seq    int64
	nodes  map[string]memNode
	online map[string]map[string]int // OnlineTable
}

// memNode is a node's newest report, or its removal (gone), and the
// sequence number of that write.
type memNode struct {
	l    NodeLoad
	seq  int64
	gone bool
}

// NewMemoryLoadTable returns an empty table.
func NewMemoryLoadTable() *MemoryLoadTable { return &MemoryLoadTable{nodes: map[string]memNode{}} }

// Report implements LoadTable.
func (t *MemoryLoadTable) Report(ctx context.Context, l NodeLoad) error {
	if l.ID == "" {
		return ErrNoID
	}
	l.At = time.UnixMilli(l.At.UnixMilli()) // as a shared table keeps it
	t.mu.Lock()
	t.seq++
	t.nodes[l.ID] = memNode{l: l, seq: t.seq}
	t.mu.Unlock()
	return nil
}

// Snapshot implements LoadTable.
func (t *MemoryLoadTable) Snapshot(ctx context.Context) ([]NodeLoad, error) {
	t.mu.Lock()
	out := make([]NodeLoad, 0, len(t.nodes))
	for _, n := range t.nodes {
		if !n.gone {
			out = append(out, n.l)
		}
	}
	t.mu.Unlock()
	sortLoads(out)
	return out, nil
}

func sortLoads(ls []NodeLoad) {
	slices.SortFunc(ls, func(a, b NodeLoad) int { return strings.Compare(a.ID, b.ID) })
}

// Remove implements LoadTable.
func (t *MemoryLoadTable) Remove(ctx context.Context, id string) error {
	t.mu.Lock()
	if n, ok := t.nodes[id]; ok && !n.gone {
		t.seq++
		t.nodes[id] = memNode{l: NodeLoad{ID: id, At: n.l.At}, seq: t.seq, gone: true}
	}
	t.mu.Unlock()
	return nil
}

// Shards implements ChangeReader.
func (t *MemoryLoadTable) Shards() int { return 1 }

// Changes implements ChangeReader.
func (t *MemoryLoadTable) Changes(ctx context.Context, cursor []string) (Changes, []string, error) {
	ch := Changes{ShardOf: func(string) int { return 0 }}
	since := int64(-1) // never read
	if len(cursor) == 1 {
		if n, err := strconv.ParseInt(cursor[0], 10, 64); err == nil {
			since = n
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	next := []string{strconv.FormatInt(t.seq, 10)}
	if since == t.seq {
		return ch, next, nil
	}
	reset := since < 0 || since > t.seq
	if reset {
		ch.Reset = []int{0}
	}
	for id, n := range t.nodes {
		switch {
		case !reset && n.seq <= since:
		case n.gone:
			if !reset {
				ch.Removed = append(ch.Removed, id)
			}
		default:
			ch.Loads = append(ch.Loads, n.l)
		}
	}
	return ch, next, nil
}

// Prune removes the reports made before cutoff and the removals older than
// it (with their nodes' online counts), and returns how many it removed.
func (t *MemoryLoadTable) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for id, nd := range t.nodes {
		if nd.l.At.Before(cutoff) {
			delete(t.nodes, id)
			delete(t.online, id)
			n++
		}
	}
	return n, nil
}

var (
	_ Pruner = (*MemoryLoadTable)(nil)
	_ Pruner = (*RedisLoadTable)(nil)
)

// Reporter sends a node's load to a LoadTable: every Interval while it
// changes, and at least every MaxInterval while it does not, so that an
// idle node costs the table (and itself) a report a quarter second rather
// than one every few milliseconds, and a busy one is still seen within an
// Interval. The staleness the allocators judge by must exceed MaxInterval.
type Reporter struct {
	Table    LoadTable
	Interval time.Duration
	// MaxInterval is the longest time between two reports. Zero: 250 ms;
	// below Interval: every Interval (the old behaviour).
	MaxInterval time.Duration
	// Load returns the node's current load; the reporter stamps At.
	Load func() NodeLoad
	Now  func() time.Time
	// Ready holds the first report back until it is true: a node that
	// cannot yet verify tokens (its keyring not loaded) must not be handed
	// to clients. Nil: ready at once.
	Ready func() bool
	// Sent counts the reports made, for tests and benchmarks.
	Sent atomic.Int64
}

// Run reports until ctx is done, then removes the node from the table so that
// allocators stop handing it out at once.
func (r *Reporter) Run(ctx context.Context) error {
	iv := r.Interval
	if iv <= 0 {
		iv = defaultReportInterval
	}
	maxIv := r.MaxInterval
	if maxIv == 0 {
		maxIv = defaultMaxReportInterval
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	// Looks back off while nothing changes (up to maxLook), so an idle
	// node wakes a few dozen times a second rather than every Interval;
	// the first change after a quiet spell is seen within maxLook, and
	// then every Interval while changes go on.
	maxLook := min(8*iv, max(maxIv, iv))
	look := iv
	t := time.NewTimer(look)
	defer t.Stop()
	var (
		id       string
		last     NodeLoad
		lastAt   time.Time
		reported bool
	)
	for {
		if r.Ready == nil || r.Ready() {
			l := r.Load()
			l.CPU = math.Round(l.CPU*100) / 100 // a change of CPU below 1 % is not news
			at := now()
			changed := !reported || !sameLoad(l, last)
			if changed || at.Sub(lastAt) >= maxIv {
				l.At = at
				id = l.ID
				if r.Table.Report(ctx, l) == nil {
					r.Sent.Add(1)
					last, lastAt, reported = l, at, true
				} // a failed report is retried next look; staleness handles the rest
			}
			if changed {
				look = iv
			} else {
				look = min(2*look, maxLook)
			}
		}
		t.Reset(look)
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if id != "" {
				_ = r.Table.Remove(rctx, id)
			}
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// sameLoad reports whether a (now) says nothing new over b (last
// reported), apart from At. Connections are news once they moved by a
// thousandth of the capacity (any change when there is none): at show start
// an edge's count changes every few milliseconds, and a report per change
// would cost the table a write per node every Interval for a difference
// the allocator's headroom cannot see. CPU is rounded to 1 % by the caller.
func sameLoad(a, b NodeLoad) bool {
	step := max(1, a.Capacity/1000)
	d := a.Conns - b.Conns
	return a.ID == b.ID && a.Kind == b.Kind && a.Addr == b.Addr && a.Line == b.Line && a.Region == b.Region &&
		a.Capacity == b.Capacity && a.CPU == b.CPU && a.Draining == b.Draining && d < step && -d < step
}

// defaultMaxReportInterval is the longest a node stays silent while its
// load does not change (Reporter.MaxInterval).
const defaultMaxReportInterval = 250 * time.Millisecond
