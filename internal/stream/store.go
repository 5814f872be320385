// Package stream holds the room streams: the append-only logs that ingest
// writes and the slicer and edge read. Each room has two lanes: Barrage
// (droppable comments) and Live (gifts and system messages, which the edge
// also pushes). The entry id of an append is the message's identity and its
// timestamp (the store's clock decides which second a message belongs to).
//
// The interface is shaped after Redis Streams (XADD, XREADGROUP, XACK,
// XAUTOCLAIM, XTRIM MINID, XREAD) so that the Redis implementation sits beside
// the in-memory one. Implementations are safe for concurrent use.
package stream

import (
	"context"
	"errors"
	"time"

	"danmaku/sdk/wire"
)

// Lane selects one of a room's two streams.
type Lane uint8

const (
	// Barrage carries viewers' comments.
	Barrage Lane = iota
	// Live carries gifts and system messages: never dropped, pushed by the edge.
	Live
)

func (l Lane) String() string {
	if l == Live {
		return "live"
	}
	return "barrage"
}

// Key names one stream.
type Key struct {
	Room string
	Lane Lane
}

// SiteRoom is the room name of the site stream: the site-wide broadcasts
// that every live room shows. No room can be named so (wire.ValidRoom), the
// site stream is never registered as a room, and its messages carry
// wire.Message.Site.
const SiteRoom = "*site"

// SiteKey is the site stream.
var SiteKey = Key{Room: SiteRoom, Lane: Live}

// Room is a room known to the store.
type Room struct {
	ID string
	// Opened is when the room was first opened or appended to. A slicer
	// starting a room without history writes its seconds from here, so a
	// viewer who opened the room never waits on a second nobody writes.
	Opened time.Time
}

// Entry is one stored message; Msg.ID equals the entry id.
type Entry = wire.Message

// Errors.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("stream: store closed")
	// ErrBadID is returned for a malformed entry id argument.
	ErrBadID = errors.New("stream: bad entry id")
)

// Store is the room streams backend.
type Store interface {
	// Append stores msgs on key, in order, and returns them with their
	// assigned ids (the ID field of each input is ignored). Batching is the
	// caller's business; an implementation pipelines a batch in one round trip.
	Append(ctx context.Context, key Key, msgs []wire.Message) ([]wire.Message, error)

	// ReadGroup returns up to count entries of key not yet delivered to group,
	// blocking up to block for at least one (0: don't block). The group is
	// created at the start of the stream if it does not exist. Delivered
	// entries stay pending for consumer until acknowledged.
	ReadGroup(ctx context.Context, key Key, group, consumer string, count int, block time.Duration) ([]Entry, error)

	// Claim transfers to consumer the entries pending in group for longer
	// than minIdle (another consumer died holding them) and returns them.
	Claim(ctx context.Context, key Key, group, consumer string, minIdle time.Duration, count int) ([]Entry, error)

	// PendingFloor returns the smallest id delivered to group and not yet
	// acknowledged, by any consumer; ok is false when nothing is pending. A
	// trim never passes it, so entries a deposed consumer read (and nobody
	// has settled) survive until someone claims them.
	PendingFloor(ctx context.Context, key Key, group string) (id string, ok bool, err error)

	// DropGroup forgets group and whatever it holds pending (a room's group
	// on the site stream once the room has ended: the site stream outlives
	// every room). Dropping a group or a stream that does not exist is no
	// error.
	DropGroup(ctx context.Context, key Key, group string) error

	// Ack acknowledges ids in group.
	Ack(ctx context.Context, key Key, group string, ids ...string) error

	// TrimBefore removes entries with ids below minID. Callers only trim
	// behind what has been durably written.
	TrimBefore(ctx context.Context, key Key, minID string) error

	// Read returns up to count entries with ids above after ("" or "0": from
	// the start; "$": only new ones), blocking up to block for at least one.
	// It is the fan-out read of the edge and of resuming clients; no group
	// state is kept.
	Read(ctx context.Context, key Key, after string, count int, block time.Duration) ([]Entry, error)

	// LastID returns the id of the newest entry of key ("0-0" when empty).
	LastID(ctx context.Context, key Key) (string, error)

	// Rooms lists the rooms that have been opened or appended to, with the
	// time (by the store's clock) each was first opened.
	Rooms(ctx context.Context) ([]Room, error)

	// OpenRoom registers a room so that the slicer writes its seconds from
	// now on, even before the first message. Opening an open room keeps its
	// first open time.
	OpenRoom(ctx context.Context, room string) error

	// Now returns the store's clock, the one that stamps entry ids.
	Now(ctx context.Context) (time.Time, error)

	// DrainRoom reads, in one atomic step, the store's clock and up to
	// count entries of each of room's two lanes not yet delivered to group.
	// Every entry stamped before the returned time has then been delivered
	// to group (by this call or an earlier one): it is the one round trip a
	// slicer needs to know a segment complete.
	DrainRoom(ctx context.Context, room, group, consumer string, count int) (now time.Time, barrage, live []Entry, err error)

	// CloseRoom forgets a room whose event has ended: it leaves the
	// registry at once, and its streams (both lanes) are removed after
	// retention (0: at once), kept until then for moderation and replay of
	// what the segments did not show.
	CloseRoom(ctx context.Context, room string, retention time.Duration) error
}
