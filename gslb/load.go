package gslb

import (
	"context"
	"errors"
	"math"
	"sort"
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
	// Line is the ISP line or region class the address serves; "" is BGP
	// (reachable from every line).
	Line string `json:"line,omitempty"`
	// Conns is the current number of connections (edge) or in-flight
	// requests (ingest).
	Conns int `json:"conns"`
	// Capacity is the number of connections the node accepts; 0 means
	// unlimited.
	Capacity int `json:"cap"`
	// CPU is the node's CPU use, 0..1.
	CPU float64 `json:"cpu"`
	// Rooms is the number of viewers online per room (edge only); the room
	// bucket's capacity follows it.
	Rooms map[string]int `json:"rooms,omitempty"`
	// Draining marks a node that takes no new clients (lame duck).
	Draining bool `json:"draining,omitempty"`
	// At is when the report was made, by the reporter's clock.
	At time.Time `json:"at"`
}

// LoadTable is where nodes report their load and allocators read it. The Redis
// implementation keeps one hash field per node; the memory one a map.
type LoadTable interface {
	Report(ctx context.Context, l NodeLoad) error
	// Snapshot returns every node's newest report, sorted by ID.
	Snapshot(ctx context.Context) ([]NodeLoad, error)
	// Remove forgets a node (clean shutdown).
	Remove(ctx context.Context, id string) error
}

// ErrNoID is returned by Report for a report without a node id.
var ErrNoID = errors.New("gslb: load report without node id")

var _ LoadTable = (*MemoryLoadTable)(nil)

// MemoryLoadTable is the in-process LoadTable.
type MemoryLoadTable struct {
	mu    sync.Mutex
	nodes map[string]NodeLoad
}

// NewMemoryLoadTable returns an empty table.
func NewMemoryLoadTable() *MemoryLoadTable { return &MemoryLoadTable{nodes: map[string]NodeLoad{}} }

// Report implements LoadTable.
func (t *MemoryLoadTable) Report(ctx context.Context, l NodeLoad) error {
	if l.ID == "" {
		return ErrNoID
	}
	rooms := make(map[string]int, len(l.Rooms))
	for k, v := range l.Rooms {
		rooms[k] = v
	}
	l.Rooms = rooms
	t.mu.Lock()
	t.nodes[l.ID] = l
	t.mu.Unlock()
	return nil
}

// Snapshot implements LoadTable.
func (t *MemoryLoadTable) Snapshot(ctx context.Context) ([]NodeLoad, error) {
	t.mu.Lock()
	out := make([]NodeLoad, 0, len(t.nodes))
	for _, l := range t.nodes {
		out = append(out, l)
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Remove implements LoadTable.
func (t *MemoryLoadTable) Remove(ctx context.Context, id string) error {
	t.mu.Lock()
	delete(t.nodes, id)
	t.mu.Unlock()
	return nil
}

// Prune removes the reports made before cutoff.
func (t *MemoryLoadTable) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for id, l := range t.nodes {
		if l.At.Before(cutoff) {
			delete(t.nodes, id)
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

// sameLoad reports whether a and b say the same, apart from At.
func sameLoad(a, b NodeLoad) bool {
	if a.ID != b.ID || a.Kind != b.Kind || a.Addr != b.Addr || a.Line != b.Line || a.Conns != b.Conns ||
		a.Capacity != b.Capacity || a.CPU != b.CPU || a.Draining != b.Draining || len(a.Rooms) != len(b.Rooms) {
		return false
	}
	for k, v := range a.Rooms {
		if w, ok := b.Rooms[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// defaultMaxReportInterval is the longest a node stays silent while its
// load does not change (Reporter.MaxInterval).
const defaultMaxReportInterval = 250 * time.Millisecond
