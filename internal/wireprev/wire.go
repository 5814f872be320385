package wireprev

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is the schema version written into every segment, frame and manifest.
// Decoders accept any version ≤ Version and ignore unknown fields.
const Version = 1

// Kind says what a message is. Small integers keep segments small.
type Kind uint8

const (
	// KindBarrage is a viewer's bullet comment: droppable by flow control.
	KindBarrage Kind = 1
	// KindGift is a paid gift: never dropped.
	KindGift Kind = 2
	// KindSystem is a host/admin announcement or a site-wide broadcast: never dropped.
	KindSystem Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindBarrage:
		return "barrage"
	case KindGift:
		return "gift"
	case KindSystem:
		return "system"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is a kind this version knows.
func (k Kind) Valid() bool { return k >= KindBarrage && k <= KindSystem }

// Message is one message as it is stored in a room stream and as it is sent to
// clients. Field tags are the msgpack keys of docs/segment-format.md; empty
// fields are omitted on the wire.
type Message struct {
	// ID is the stream entry id of the message's append ("<ms>-<seq>"). It is
	// the message's identity everywhere and decides which second it belongs to.
	ID string `msgpack:"id" json:"id"`
	// Kind is what the message is.
	Kind Kind `msgpack:"k" json:"k"`
	// Offset is the message's time in milliseconds relative to the start of its
	// second (0-999). Filled in when a segment or frame is built.
	Offset uint16 `msgpack:"o,omitempty" json:"o,omitempty"`
	// User is the sender's user id; empty for operator broadcasts.
	User string `msgpack:"u,omitempty" json:"u,omitempty"`
	// Nick is the sender's display name, at most MaxNickRunes characters.
	Nick string `msgpack:"n,omitempty" json:"n,omitempty"`
	// Avatar is a short avatar code the client resolves, not a URL.
	Avatar string `msgpack:"a,omitempty" json:"a,omitempty"`
	// Text is the comment or announcement text.
	Text string `msgpack:"x,omitempty" json:"x,omitempty"`
	// Gift is the gift's code (gifts only).
	Gift string `msgpack:"g,omitempty" json:"g,omitempty"`
	// Value is the value of one gift in the smallest currency unit (gifts only).
	Value int64 `msgpack:"v,omitempty" json:"v,omitempty"`
	// Count is how many gifts this message stands for; 0 means 1.
	Count uint32 `msgpack:"c,omitempty" json:"c,omitempty"`
	// Merged lists the ids of the messages a merged gift stands for (its own id
	// included), so a client that showed some of them from the edge skips them.
	Merged []string `msgpack:"ids,omitempty" json:"ids,omitempty"`
	// Order is the business order id of a gift (its idempotency key). Kept in
	// the stream for audit; not written to segments.
	Order string `msgpack:"-" json:"order,omitempty"`
	// Role is the sender's role for system messages ("host", "admin", "ops").
	Role string `msgpack:"r,omitempty" json:"r,omitempty"`
	// Site marks a site-wide broadcast (a system message shown in every
	// room): its ID is the site stream's, not the room's, so its identity
	// is of a lane of its own. Decoders that predate it ignore the field.
	Site bool `msgpack:"st,omitempty" json:"st,omitempty"`
}

// Identity returns the key clients de-duplicate by. Ids are unique per room
// and lane, and the lane follows from the kind (barrage has its own stream;
// gifts and system messages share the live stream) or, for a site-wide
// broadcast, is the site stream's, so the key is the id qualified by the
// lane.
func (m *Message) Identity() string {
	if m.Site {
		return "s/" + m.ID
	}
	return IdentityOf(m.Kind, m.ID)
}

// IdentityOf is Identity for a kind and an id (ids listed in Merged are of
// the merged message's kind).
func IdentityOf(k Kind, id string) string {
	if k == KindBarrage {
		return "b/" + id
	}
	return "l/" + id
}

// MaxNickRunes is the longest nickname carried on the wire (slim fields).
const MaxNickRunes = 6

// ErrBadID is returned for a message id that is not "<ms>-<seq>".
var ErrBadID = errors.New("wire: malformed message id")

// ParseID splits a stream entry id into its millisecond time and sequence.
func ParseID(id string) (ms int64, seq uint64, err error) {
	a, b, ok := strings.Cut(id, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	ms, err = strconv.ParseInt(a, 10, 64)
	if err != nil || ms < 0 {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	seq, err = strconv.ParseUint(b, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	return ms, seq, nil
}

// FormatID is the inverse of ParseID.
func FormatID(ms int64, seq uint64) string {
	return strconv.FormatInt(ms, 10) + "-" + strconv.FormatUint(seq, 10)
}

// CompareIDs orders two well-formed ids; malformed ids sort first.
func CompareIDs(a, b string) int {
	am, as, aerr := ParseID(a)
	bm, bs, berr := ParseID(b)
	switch {
	case aerr != nil && berr != nil:
		return strings.Compare(a, b)
	case aerr != nil:
		return -1
	case berr != nil:
		return 1
	case am != bm:
		if am < bm {
			return -1
		}
		return 1
	case as != bs:
		if as < bs {
			return -1
		}
		return 1
	}
	return 0
}

// TruncateRunes cuts s to at most n runes.
func TruncateRunes(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
