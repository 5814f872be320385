// Package slicer chooses what each second shows and writes it once. One
// slicer leads each room (a lease); it reads the room's streams with a
// consumer group into four priority queues — system, high-value gifts,
// low-value gifts, barrage — and, when a second is due by the stream store's
// clock, fills the per-second budget by queue shares (allocate), merges
// identical gifts, carries over the gifts and system messages that do not fit
// (never dropped) and samples barrage uniformly. The second is encoded as one
// msgpack segment and written under a deterministic key with a conditional
// put, so a deposed leader cannot overwrite it; empty seconds are written
// too. A live manifest names the newest second and only moves forward.
// Messages are acknowledged after their segment is durable, and streams are
// trimmed only behind what has been written.
//
// A Slicer is safe for concurrent use; each room it leads runs in its own
// goroutine and owns that room's state.
package slicer
