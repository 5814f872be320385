package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"danmaku/sdk/wire"
)

// defaultBatchTTL is how long a RoomGate remembers a batch it stored, so
// that the same batch sent again answers its first result. An ingest node
// resends a batch whose answer it lost as soon as the store answers again,
// within seconds; ten minutes covers any outage it rides out (hold).
const defaultBatchTTL = 10 * time.Minute

// RoomGate is a room's shared state behind the barrage path: its token
// bucket, global across ingest nodes, and its Barrage lane. An ingest node
// sends it one Flush per room and write-behind window, however many
// comments the window collected: the bucket and the append are one step
// and, on Redis, one round trip (docs/architecture.md, "Room limits").
// Implementations are safe for concurrent use.
type RoomGate interface {
	// Flush takes tokens from room's bucket for the batch and appends what
	// they admit, in one atomic step:
	//
	//   - b.Msgs[:b.Admitted] were admitted by the node already (its share
	//     of the limit while the gate was unreachable); they are appended
	//     whatever the bucket holds, and charged to it down to empty;
	//   - b.Msgs[b.Admitted:] are undecided: the bucket gives them tokens
	//     in order while it has whole tokens, and those are appended; the
	//     rest are not.
	//
	// It returns how many undecided messages were appended (the first
	// ones). A Flush of a batch id stored before (within the batch TTL)
	// stores nothing and answers the first result with Replayed set; so an
	// error, which may be ambiguous (the batch may be stored), is answered
	// by sending the same batch again, unchanged.
	Flush(ctx context.Context, room string, b Batch) (FlushResult, error)
}

// Batch is one room's comments of one write-behind window.
type Batch struct {
	// ID names the batch: unique per node and batch (the node's id and a
	// sequence number).
	ID string
	// Msgs are the comments, in arrival order; Admitted says how many of
	// the first ones need no token.
	Msgs     []wire.Message
	Admitted int
	// Capacity and PerSec size the room's bucket.
	Capacity, PerSec float64
}

// FlushResult is what a Flush did.
type FlushResult struct {
	// Granted is how many undecided messages were appended: Msgs[Admitted:
	// Admitted+Granted]. Fewer than were undecided means the bucket ran dry.
	Granted int
	// Replayed is set when the batch had been stored by an earlier Flush.
	Replayed bool
}

// ErrBadBatch is returned (wrapped) by Flush for a batch it cannot take:
// no id, Admitted out of range, or a bucket size that is not a finite,
// non-negative number. Nothing is stored.
var ErrBadBatch = errors.New("ingest: bad batch")

func checkBatch(room string, b Batch) error {
	switch {
	case !wire.ValidRoom(room):
		return fmt.Errorf("%w: room %q", ErrBadBatch, room)
	case b.ID == "":
		return fmt.Errorf("%w: no id", ErrBadBatch)
	case b.Admitted < 0 || b.Admitted > len(b.Msgs):
		return fmt.Errorf("%w: %d admitted of %d", ErrBadBatch, b.Admitted, len(b.Msgs))
	case !finite(b.Capacity) || !finite(b.PerSec) || b.Capacity < 0 || b.PerSec < 0:
		return fmt.Errorf("%w: capacity %v, rate %v: must be finite and >= 0", ErrBadBatch, b.Capacity, b.PerSec)
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
