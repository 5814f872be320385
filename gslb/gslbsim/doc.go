// Package gslbsim replays one arrival trace of viewers against several
// edge-choosing strategies — the gslb.Allocator as it is, always the least
// loaded, and two random choices — in simulated time, and measures how evenly
// each spreads viewers over edges of unequal capacity, and where the viewers
// of an edge that dies go.
//
// The model: a cluster of edges and a few ingest nodes reports its load into
// one shared gslb.MemoryLoadTable every Report interval (each node at its own
// phase, as independent reporters do); several allocator instances each sync
// that table every Sync interval (again at their own phases), so what an
// instance sees is up to Report+Sync old. Each arrival of the trace asks one
// instance, dials the first live address of its answer (a dead first address
// costs a failed dial and the next one is used, as the SDK does) and stays for
// its session. Half way through, one edge dies without a goodbye: it stops
// reporting (allocators keep handing it out until its report goes stale) and
// its viewers come back after a random wait, each to the first live address
// of the allocation it was given at join time.
//
// Time is a clock.Fake moved by the simulator, never the wall clock, so a run
// is a pure function of its Config: the same seed gives the same numbers.
// Strategies see the cluster only through the gslb package's exported API
// (NewAllocator, SyncOnce, Allocate, LoadTable), so a change to the allocator
// shows up here without touching this package.
//
// Run is safe for concurrent use; it runs each strategy on its own goroutine
// with its own table, clock and allocators, sharing only the read-only trace.
package gslbsim
