// Package loadtable is the load table: where ingest and edge nodes report
// their load (NodeLoad) and the gslb's allocators read it, and the online
// table beside it, where edges report their viewers per room and ingest
// nodes read them. It holds the tables (Table, ChangeReader, OnlineTable →
// MemoryTable, RedisTable: reports as short text records in 16 shards,
// each with a change log), the node side (Reporter and its ReportGate,
// which write a load only when what the allocators decide from has
// changed; OnlineReporter) and the reader side (View, a reader's copy kept
// up to date from the change logs). Headroom, the one measure of a node's
// free share, is here because both sides judge by it.
//
// It is its own package so that a node (edge, ingest) reports its load
// without importing the allocator. The tables are safe for concurrent use;
// a Reporter runs in one goroutine; a ReportGate and a View are not safe
// for concurrent use.
package loadtable
