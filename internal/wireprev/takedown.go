package wireprev

import (
	"encoding/json"
	"fmt"
)

// A takedown removes a published message from viewers' screens without
// touching the immutable segment that holds it: the room's live lane carries
// it to connected viewers (a frame's td) and to the slicer (the next
// segment's td), and the room's takedown list (TakedownListKey), named by the
// manifest's td count, serves late joiners and replays.
// docs/segment-format.md "Takedowns" is the normative description.

// TakenDown names a message a moderator took down.
type TakenDown struct {
	ID   string `msgpack:"id" json:"id"`
	Kind Kind   `msgpack:"k" json:"k"`
}

// Identity is the key clients de-duplicate by (Message.Identity): a takedown
// names a message by its lane's id.
func (t TakenDown) Identity() string { return IdentityOf(t.Kind, t.ID) }

// TakedownList is the room's whole list, for late joiners and replays.
type TakedownList struct {
	V    int         `json:"v"`    // 1
	Room string      `json:"room"` // the room it lists
	N    uint64      `json:"n"`    // takedowns made in the room (the manifest's td)
	IDs  []TakenDown `json:"ids"`  // oldest first
}

// TakedownListKey is the object key of room's takedown list.
func TakedownListKey(room string) string { return "rooms/" + room + "/takedowns.json" }

// The takedown list's content type and cache policy: short-lived like the
// manifest, since it grows during the event.
const (
	TakedownListContentType  = "application/json"
	TakedownListCacheControl = "public, max-age=1"
)

// MaxTakedownListBytes bounds what DecodeTakedownList accepts: a list of the
// server's largest (10,000 entries of about 40 bytes) fits with room to spare.
const MaxTakedownListBytes = 2 << 20

// EncodeTakedownList encodes a takedown list as JSON (ids [] when empty).
func EncodeTakedownList(l *TakedownList) ([]byte, error) {
	c := *l
	if c.IDs == nil {
		c.IDs = []TakenDown{}
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("wire: encode takedown list: %w", err)
	}
	return b, nil
}

// DecodeTakedownList decodes and validates a room's takedown list.
func DecodeTakedownList(b []byte) (*TakedownList, error) {
	if len(b) > MaxTakedownListBytes {
		return nil, ErrTooLarge
	}
	var l TakedownList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%w: takedown list: %v", ErrDecode, err)
	}
	if l.V != Version {
		return nil, fmt.Errorf("%w: takedown list v=%d", ErrVersion, l.V)
	}
	if !ValidRoom(l.Room) || uint64(len(l.IDs)) > l.N {
		return nil, fmt.Errorf("%w: takedown list header", ErrInvalid)
	}
	if err := validTakenDown(l.IDs); err != nil {
		return nil, err
	}
	if len(l.IDs) == 0 {
		l.IDs = nil
	}
	return &l, nil
}

// ValidTakenDown reports whether t names a message this version can carry:
// a well-formed id and a known kind.
func ValidTakenDown(t TakenDown) bool {
	_, _, err := ParseID(t.ID)
	return err == nil && t.Kind.Valid()
}

// validTakenDown checks a td list; any bad entry makes the whole object a
// decode error, as a bad message does.
func validTakenDown(ts []TakenDown) error {
	for i := range ts {
		if !ValidTakenDown(ts[i]) {
			return fmt.Errorf("%w: td %d", ErrInvalid, i)
		}
	}
	return nil
}
