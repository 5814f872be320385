package wireprev

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
)

// SegmentDuration is the default span of one segment in milliseconds. A room
// may have shorter ones (ValidSegmentMs); their segments are version 2.
const SegmentDuration = 1000

// VersionSubSecond is the schema version of segments and manifests of rooms
// whose segments are shorter than a second. A version-1 decoder would read
// such a segment as a whole second, so it must reject it (it does: v > 1).
const VersionSubSecond = 2

// ValidSegmentMs reports whether ms is a segment duration a room may have.
// Each divides a second, so every whole second is a segment boundary and a
// room can change its duration there.
func ValidSegmentMs(ms int64) bool { return ms == 1000 || ms == 500 || ms == 250 }

// VersionFor is the schema version of a segment or manifest of duration ms.
func VersionFor(ms int64) int {
	if ms == SegmentDuration {
		return 1
	}
	return VersionSubSecond
}

// MaxSegmentBytes bounds what a decoder accepts; a real segment is a few KB.
const MaxSegmentBytes = 4 << 20

// Content types and cache policies of the objects the CDN serves.
const (
	SegmentContentType  = "application/msgpack"
	ManifestContentType = "application/json"
	SegmentCacheControl = "public, max-age=31536000, immutable"
	// ManifestCacheControl keeps the manifest fresh: it names the newest second.
	ManifestCacheControl = "public, max-age=1"
)

// Segment is one slot of one room (a second, or a part of one), as written
// to object storage.
type Segment struct {
	V    int    `msgpack:"v"`
	Room string `msgpack:"room"`
	// Second is the unix second the segment starts in.
	Second int64  `msgpack:"t"`
	Seq    uint64 `msgpack:"seq"`
	// Dur is the segment's span in ms: 1000, or 500 or 250 (version 2).
	Dur uint32 `msgpack:"dur"`
	// Start is the unix ms the segment starts at; version 2 only (a
	// version-1 segment starts at Second·1000).
	Start    int64     `msgpack:"ms,omitempty"`
	Messages []Message `msgpack:"m"`
	// TakenDown lists takedowns first known to the writer in this slot
	// (takedown.go); decoders that predate it ignore the field.
	TakenDown []TakenDown `msgpack:"td,omitempty"`
}

// StartMs is the unix ms the segment starts at, whatever its version.
func (s *Segment) StartMs() int64 {
	if s.V >= VersionSubSecond {
		return s.Start
	}
	return s.Second * 1000
}

// Slot is the segment's index on its duration's grid: StartMs / Dur.
func (s *Segment) Slot() int64 { return s.StartMs() / int64(s.Dur) }

// NewSegment returns the header of room's slot of duration dur ms, with the
// version and fields that duration is written with.
func NewSegment(room string, dur, slot int64, seq uint64) *Segment {
	start := slot * dur
	s := &Segment{V: VersionFor(dur), Room: room, Second: start / 1000, Seq: seq, Dur: uint32(dur)}
	if s.V >= VersionSubSecond {
		s.Start = start
	}
	return s
}

// Manifest names a room's newest written segment. It is JSON so that any
// client can read it without a msgpack decoder.
type Manifest struct {
	V      int    `json:"v"`
	Room   string `json:"room"`
	Second int64  `json:"t"`
	Seq    uint64 `json:"seq"`
	Dur    uint32 `json:"dur"`
	// Start is the newest segment's start in unix ms; version 2 only.
	Start int64 `json:"ms,omitempty"`
	// Ended marks the last manifest of a room whose event has ended: the
	// segment it names is the room's last, and no later one will come.
	Ended bool `json:"ended,omitempty"`
	// Takedowns is how many takedowns the room's list (TakedownListKey)
	// holds; absent: none. A client holding fewer fetches the list.
	Takedowns uint64 `json:"td,omitempty"`
}

// ManifestFor is the manifest naming seg as the newest segment.
func ManifestFor(seg *Segment) *Manifest {
	return &Manifest{V: seg.V, Room: seg.Room, Second: seg.Second, Seq: seg.Seq, Dur: seg.Dur, Start: seg.Start}
}

// StartMs is the newest segment's start in unix ms, whatever the version.
func (m *Manifest) StartMs() int64 {
	if m.V >= VersionSubSecond {
		return m.Start
	}
	return m.Second * 1000
}

// Slot is the newest segment's index on its duration's grid.
func (m *Manifest) Slot() int64 { return m.StartMs() / int64(m.Dur) }

// Frame is what the edge sends a WebSocket client: the messages of one merge
// window, in stream order.
type Frame struct {
	V        int       `msgpack:"v"`
	Room     string    `msgpack:"room"`
	Messages []Message `msgpack:"m"`
	// TakenDown lists takedowns the edge relays from the live lane; a frame
	// may carry only td (empty m).
	TakenDown []TakenDown `msgpack:"td,omitempty"`
}

// Decoding errors. Each wraps ErrDecode so callers can test for either.
var (
	// ErrDecode is the parent of every decoding error.
	ErrDecode = errors.New("wire: decode")
	// ErrTooLarge is returned for input above the size a decoder accepts.
	ErrTooLarge = fmt.Errorf("%w: input too large", ErrDecode)
	// ErrVersion is returned for a schema version newer than this package knows.
	ErrVersion = fmt.Errorf("%w: unsupported version", ErrDecode)
	// ErrInvalid is returned for a well-formed object that breaks the schema.
	ErrInvalid = fmt.Errorf("%w: invalid", ErrDecode)
)

var roomRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidRoom reports whether id may name a room: it is used in object keys and
// Redis keys, so it is restricted to URL- and key-safe characters.
func ValidRoom(id string) bool { return roomRE.MatchString(id) }

// SegmentKey is the object key of a room's one-second segment of second.
func SegmentKey(room string, second int64) string {
	return "rooms/" + room + "/s/" + strconv.FormatInt(second, 10) + ".msgpack"
}

// SlotKey is the object key of room's slot of duration dur ms: one-second
// segments by their unix second (SegmentKey), shorter ones by their start
// in unix ms under "ms/", so that a one-second reader never mistakes one
// for the other.
func SlotKey(room string, dur, slot int64) string {
	if dur == SegmentDuration {
		return SegmentKey(room, slot)
	}
	return "rooms/" + room + "/ms/" + strconv.FormatInt(slot*dur, 10) + ".msgpack"
}

// ManifestKey is the object key of a room's live manifest.
func ManifestKey(room string) string { return "rooms/" + room + "/live.json" }

// EncodeSegment encodes s as msgpack. Messages must already be slim (Offset
// set, Order cleared by the msgpack tag).
func EncodeSegment(s *Segment) ([]byte, error) {
	if s.Messages == nil {
		s.Messages = []Message{}
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("wire: encode segment: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeSegment decodes and validates a segment read back from storage or a
// CDN. It never panics on any input.
func DecodeSegment(b []byte) (*Segment, error) {
	if len(b) > MaxSegmentBytes {
		return nil, ErrTooLarge
	}
	if err := checkLengths(b); err != nil {
		return nil, fmt.Errorf("%w: segment: %v", ErrDecode, err)
	}
	var s Segment
	if err := msgpack.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: segment: %v", ErrDecode, err)
	}
	if s.V < 1 || s.V > VersionSubSecond {
		return nil, fmt.Errorf("%w: segment v=%d", ErrVersion, s.V)
	}
	if !ValidRoom(s.Room) || s.Second < 0 || !validTiming(s.V, s.Second, s.Dur, s.Start) {
		return nil, fmt.Errorf("%w: segment header", ErrInvalid)
	}
	if s.Dur == 0 {
		s.Dur = SegmentDuration
	}
	if err := validMessages(s.Messages); err != nil {
		return nil, err
	}
	if err := validTakenDown(s.TakenDown); err != nil {
		return nil, err
	}
	if len(s.TakenDown) == 0 {
		s.TakenDown = nil // "td":[] reads as absent, as it re-encodes
	}
	return &s, nil
}

// EncodeFrame encodes a WebSocket frame.
func EncodeFrame(f *Frame) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("wire: encode frame: %w", err)
	}
	return buf.Bytes(), nil
}

// MaxFrameBytes bounds a decoded WebSocket frame.
const MaxFrameBytes = 1 << 20

// DecodeFrame decodes and validates a WebSocket frame.
func DecodeFrame(b []byte) (*Frame, error) {
	if len(b) > MaxFrameBytes {
		return nil, ErrTooLarge
	}
	if err := checkLengths(b); err != nil {
		return nil, fmt.Errorf("%w: frame: %v", ErrDecode, err)
	}
	var f Frame
	if err := msgpack.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: frame: %v", ErrDecode, err)
	}
	if f.V < 1 || f.V > Version {
		return nil, fmt.Errorf("%w: frame v=%d", ErrVersion, f.V)
	}
	if !ValidRoom(f.Room) {
		return nil, fmt.Errorf("%w: frame room", ErrInvalid)
	}
	if err := validMessages(f.Messages); err != nil {
		return nil, err
	}
	if err := validTakenDown(f.TakenDown); err != nil {
		return nil, err
	}
	if len(f.TakenDown) == 0 {
		f.TakenDown = nil
	}
	return &f, nil
}

// EncodeManifest encodes a manifest as JSON.
func EncodeManifest(m *Manifest) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("wire: encode manifest: %w", err)
	}
	return b, nil
}

// DecodeManifest decodes and validates a manifest.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > 64<<10 {
		return nil, ErrTooLarge
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrDecode, err)
	}
	if m.V < 1 || m.V > VersionSubSecond {
		return nil, fmt.Errorf("%w: manifest v=%d", ErrVersion, m.V)
	}
	if !ValidRoom(m.Room) || m.Second < 0 || !validTiming(m.V, m.Second, m.Dur, m.Start) {
		return nil, fmt.Errorf("%w: manifest header", ErrInvalid)
	}
	if m.Dur == 0 {
		m.Dur = SegmentDuration
	}
	return &m, nil
}

// validTiming checks the duration and start fields of a segment or manifest
// header of version v: version 1 is one second long (dur 1000; an absent dur
// from an early writer reads as 1000 too), version 2 is shorter and starts
// on its own grid, inside second t.
func validTiming(v int, t int64, dur uint32, start int64) bool {
	if v == 1 {
		return dur == 0 || dur == SegmentDuration
	}
	d := int64(dur)
	return d != SegmentDuration && ValidSegmentMs(d) && start >= 0 && start%d == 0 && start/1000 == t
}

// checkLengths walks b once without building anything, so that every array
// and map length it claims is backed by that many elements in b. Unmarshal
// preallocates a struct slice to the claimed length (msgpack v5.4.1 ignores its
// own allocation limit there), so without this walk an 8-byte input claiming
// 2^31 messages exhausts memory and kills the process.
func checkLengths(b []byte) error {
	return msgpack.NewDecoder(bytes.NewReader(b)).Skip()
}

func validMessages(ms []Message) error {
	for i := range ms {
		if _, _, err := ParseID(ms[i].ID); err != nil {
			return fmt.Errorf("%w: message %d id", ErrInvalid, i)
		}
		if !ms[i].Kind.Valid() {
			return fmt.Errorf("%w: message %d kind %d", ErrInvalid, i, ms[i].Kind)
		}
		if ms[i].Offset >= SegmentDuration {
			return fmt.Errorf("%w: message %d offset %d", ErrInvalid, i, ms[i].Offset)
		}
	}
	return nil
}

// Slim returns the copy of m that goes into a segment or frame: the offset
// relative to its second filled in, nickname cut, server-only fields cleared.
func Slim(m Message) Message {
	if ms, _, err := ParseID(m.ID); err == nil {
		m.Offset = uint16(ms % SegmentDuration)
	}
	m.Nick = TruncateRunes(m.Nick, MaxNickRunes)
	m.Order = ""
	return m
}

// SecondOf returns the unix second a message id belongs to.
func SecondOf(id string) (int64, error) {
	ms, _, err := ParseID(id)
	if err != nil {
		return 0, err
	}
	return ms / 1000, nil
}
