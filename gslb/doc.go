// Package gslb is the address allocator. Ingest and edge nodes report their
// load into the load table (internal/loadtable) when what the allocator decides from has changed —
// headroom by a step, a bound crossed, draining, capacity — at most every
// 50 ms, and at least every 250 ms (loadtable.Reporter, ReportGate);
// the Allocator syncs that table in its own goroutine (every 5 ms while the
// syncs bring news, backing off to every 50 ms while they do not; never per
// request), drops stale and overloaded nodes, and hands edge
// addresses out in proportion to each node's headroom (a golden-ratio
// sequence over the nodes' headroom), with per-user fallbacks drawn in
// proportion to headroom, so that stale load data never stampedes one node
// and a dead node's viewers spread. Ingest nodes are chosen per user by
// rendezvous hashing weighted by headroom, sticky while healthy. The entry
// endpoint verifies the business ticket locally and returns the addresses, a
// dynamic token, the CDN base URL, the server time and the segment timing.
//
// The Allocator is safe for concurrent use; its hot path reads an immutable
// snapshot swapped in atomically by the sync goroutine.
package gslb
