package loadtable

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// Heard is when this reader first read the report, by its own clock
	// (View sets it; never stored): what Age judges by, so that a reporter
	// whose clock is off neither ages its reports nor keeps them young.
	Heard time.Time `json:"-"`
}

// Seen is when the report is from by the reader's clock: when the reader
// first read it (Heard), or At when it has no Heard.
func (l NodeLoad) Seen() time.Time {
	if !l.Heard.IsZero() {
		return l.Heard
	}
	return l.At
}

// Age is how old the report is at now by the reader's clock (Seen).
func (l NodeLoad) Age(now time.Time) time.Duration { return now.Sub(l.Seen()) }

// Table is where nodes report their load and allocators read it. The
// Redis implementation spreads the reports over shards (hashes in slots of
// their own) with a change log each, the memory one keeps a map; both are
// also ChangeReaders, so that an allocator's sync reads what changed rather
// than the whole table.
type Table interface {
	Report(ctx context.Context, l NodeLoad) error
	// Snapshot returns every node's newest report, sorted by ID.
	Snapshot(ctx context.Context) ([]NodeLoad, error)
	// Remove forgets a node (clean shutdown).
	Remove(ctx context.Context, id string) error
}

// ChangeReader is a Table that can say what changed since a reader's
// last look. A cursor holds one position per shard; a nil cursor (a new
// reader) reads every shard whole.
type ChangeReader interface {
	Table
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
var ErrNoID = errors.New("loadtable: load report without node id")

var (
	_ Table        = (*MemoryTable)(nil)
	_ ChangeReader = (*MemoryTable)(nil)
)

// MemoryTable is the in-process Table: one shard, whose log is a
// sequence number per node.
type MemoryTable struct {
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

// NewMemoryTable returns an empty table.
func NewMemoryTable() *MemoryTable { return &MemoryTable{nodes: map[string]memNode{}} }

// Report implements Table.
func (t *MemoryTable) Report(ctx context.Context, l NodeLoad) error {
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

// Snapshot implements Table.
func (t *MemoryTable) Snapshot(ctx context.Context) ([]NodeLoad, error) {
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

// Remove implements Table.
func (t *MemoryTable) Remove(ctx context.Context, id string) error {
	t.mu.Lock()
	if n, ok := t.nodes[id]; ok && !n.gone {
		t.seq++
		t.nodes[id] = memNode{l: NodeLoad{ID: id, At: n.l.At}, seq: t.seq, gone: true}
	}
	t.mu.Unlock()
	return nil
}

// Shards implements ChangeReader.
func (t *MemoryTable) Shards() int { return 1 }

// Changes implements ChangeReader.
func (t *MemoryTable) Changes(ctx context.Context, cursor []string) (Changes, []string, error) {
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
func (t *MemoryTable) Prune(ctx context.Context, cutoff time.Time) (int, error) {
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

// Pruner is a Table that can forget old reports. Nodes that die without
// removing themselves would otherwise stay in the table, and every sync
// would read them.
type Pruner interface {
	Prune(ctx context.Context, cutoff time.Time) (int, error)
}

var (
	_ Pruner = (*MemoryTable)(nil)
	_ Pruner = (*RedisTable)(nil)
)
