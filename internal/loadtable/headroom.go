package loadtable

// The bounds past which an allocator takes a node out of the hand-out, by
// default (gslb.AllocatorConfig's Overload and MaxCPU). A Reporter judges
// news by the same bounds (ReportGate).
const (
	// DefaultOverload: a node whose connections/capacity (or CPU) reaches
	// it takes no new clients.
	DefaultOverload = 0.95
	// DefaultMaxCPU: a node whose CPU reaches it takes no new clients.
	DefaultMaxCPU = 0.90
)

// Headroom is what an allocator hands a node out by, from its load alone:
// ok is false when the node is past a bound (CPU at maxCPU, or CPU or
// connections/capacity at overload) and takes no new clients; otherwise
// room, in (0, 1], is its free share — for an edge what it can still take
// before it is dropped, by connections or by CPU, whichever runs out first
// (times its capacity, it weighs the edge's hand-outs), for an ingest
// 1 − its use (its rendezvous weight). It lives with the table because
// reporters judge by it too (ReportGate): a report is news when it moves by
// a step.
func Headroom(l NodeLoad, overload, maxCPU float64) (room float64, ok bool) {
	use := l.CPU
	if l.Capacity > 0 {
		use = max(use, float64(l.Conns)/float64(l.Capacity))
	}
	if l.CPU >= maxCPU || use >= overload {
		return 0, false
	}
	if l.Kind == KindIngest {
		return 1 - use, true
	}
	room = maxCPU - l.CPU
	if l.Capacity > 0 {
		room = min(room, overload-float64(l.Conns)/float64(l.Capacity))
	}
	return room, true
}
