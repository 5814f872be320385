// Package audit is the moderation trail of the upload path: every comment
// that passes the ingest gateway — stored, masked, dropped by a limit or a
// filter, sampled away later — is one Record, batched in memory per room
// and per minute and written as one object per room, minute and node (and
// an extra part when a batch outgrows its bound) to object storage, where
// it is kept for a retention and read back by `danmaku audit`.
//
// Objects are gzip-compressed JSON lines: a Header line, then one Record a
// line. JSON rather than msgpack because the trail is read by people and
// their tools (zcat | jq) as much as by the command; gzip takes a busy
// minute's repeated room names and decisions down several times. Keys are
//
//	audit/<room>/<YYYYMMDDTHHMMZ>/<node>.<nonce>.<part>.jsonl.gz
//
// so a room's objects sort by minute, nodes never write each other's keys,
// and a restarted node (a new nonce) never overwrites its predecessor's;
// <part> numbers a process's objects (unique within it, not consecutive
// within a minute).
//
// The Recorder never blocks a request: Record appends one encoded line to
// the room's batch under a short lock, and writing happens in Run's
// goroutines. Memory is bounded (Config.MaxBytes); a record beyond it is
// not kept, but counted, logged and written into the room's next object
// header as "lost", so a gap in the trail is always visible in the trail
// itself. The Recorder is safe for concurrent use; the audit trail cannot
// be switched off (there is no disabled Recorder).
package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Decision is what the system did with a comment.
type Decision string

// Decisions. Reason says which layer decided (the ingest's reason codes:
// banned, global_limit, sensitive_word, duplicate, user_bucket,
// room_bucket, room_share; the slicer's sampled).
const (
	// Stored: appended to the room's stream as sent.
	Stored Decision = "stored"
	// Masked: appended with listed words masked; Shown holds what viewers
	// see, Text what the user sent.
	Masked Decision = "masked"
	// Dropped: answered as stored but not kept (a limit, a duplicate, a ban,
	// a rejected word under the silent policy).
	Dropped Decision = "dropped"
	// Rejected: answered with an error code (a rejected word under the
	// answering policy).
	Rejected Decision = "rejected"
	// Sampled: stored, then left out of its segment by the slicer's budget.
	Sampled Decision = "sampled"
	// TakenDown: shown, then taken down by a moderator: User is the
	// moderator, Text the reason, Reason the message's kind, ID its id.
	TakenDown Decision = "taken_down"
	// Reviewed: a moderator acted on a reported message: User and Text
	// are the message's sender and text, Reason report_takedown,
	// report_ban or report_dismiss, By the moderator, ID the message's id.
	Reviewed Decision = "reviewed"
)

// Valid reports whether d is one of the decisions above.
func (d Decision) Valid() bool {
	switch d {
	case Stored, Masked, Dropped, Rejected, Sampled, TakenDown, Reviewed:
		return true
	}
	return false
}

// Record is one comment's entry in the trail.
type Record struct {
	// At is when the decision was made (ms precision kept).
	At time.Time `json:"-"`
	// Room, User and Text are the comment's room, sender and text as the
	// ingest normalised it, before any masking.
	Room string `json:"room"`
	User string `json:"user"`
	Text string `json:"text"`
	// Decision and Reason: what was done and by which layer.
	Decision Decision `json:"decision"`
	Reason   string   `json:"reason,omitempty"`
	// Shown is the text viewers got when it differs from Text (masked).
	Shown string `json:"shown,omitempty"`
	// ID is the stream entry id when known (stored, sampled), which joins
	// an ingest record with the slicer's.
	ID string `json:"id,omitempty"`
	// By is the moderator of a Reviewed record ("": an operator key).
	By string `json:"by,omitempty"`
}

// recordJSON is Record as a line: At as unix ms under "t".
type recordJSON struct {
	T int64 `json:"t"`
	Record
}

// Header is the first line of every object.
type Header struct {
	// Version of the format: 1.
	Version int    `json:"audit"`
	Room    string `json:"room"`
	Node    string `json:"node"`
	// Minute is the batch's minute, as in the key.
	Minute string `json:"minute"`
	Part   int    `json:"part"`
	// Records is how many record lines follow (a truncated object is
	// told from a short one by it).
	Records int `json:"records"`
	// Lost counts this room's records this node could not keep (memory
	// bound reached, or not written by shutdown) since its previous object:
	// a gap just before this object's records.
	Lost int64 `json:"lost,omitempty"`
}

// formatVersion is the Header.Version this package writes and reads.
const formatVersion = 1

// Errors.
var (
	// ErrBadObject is returned by Decode for anything that is not an audit
	// object this package wrote.
	ErrBadObject = errors.New("audit: bad object")
)

// Prefix is where the trail lives in its store. A store the CDN serves
// must never hold it (it names users and what they wrote): the trail has a
// bucket or directory of its own.
const Prefix = "audit/"

// minuteLayout names a minute in keys: fixed width, so keys sort by time.
const minuteLayout = "20060102T1504Z"

// MinuteName is t's minute as keys spell it.
func MinuteName(t time.Time) string { return t.UTC().Truncate(time.Minute).Format(minuteLayout) }

// ParseMinute reads a MinuteName.
func ParseMinute(s string) (time.Time, error) { return time.Parse(minuteLayout, s) }

// RoomPrefix is the prefix of room's objects.
func RoomPrefix(room string) string { return Prefix + room + "/" }

// MinutePrefix is the prefix of room's objects of t's minute.
func MinutePrefix(room string, t time.Time) string { return RoomPrefix(room) + MinuteName(t) + "/" }

// ObjectKey is the key of one part.
func ObjectKey(room string, minute time.Time, node, nonce string, part int) string {
	return MinutePrefix(room, minute) + node + "." + nonce + "." + fmt.Sprintf("%06d", part) + ".jsonl.gz"
}

// KeyMinute returns the minute and room of an object key under Prefix.
func KeyMinute(key string) (room string, minute time.Time, ok bool) {
	rest, found := strings.CutPrefix(key, Prefix)
	if !found {
		return "", time.Time{}, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" {
		return "", time.Time{}, false
	}
	m, err := ParseMinute(parts[1])
	if err != nil {
		return "", time.Time{}, false
	}
	return parts[0], m, true
}

// appendLine appends r as one JSON line. Hand-written (the request path
// calls it once per comment); Decode reads it with encoding/json.
func appendLine(b []byte, r *Record) []byte {
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, r.At.UnixMilli(), 10)
	b = appendField(b, "room", r.Room)
	b = appendField(b, "user", r.User)
	b = appendField(b, "text", r.Text)
	b = appendField(b, "decision", string(r.Decision))
	if r.Reason != "" {
		b = appendField(b, "reason", r.Reason)
	}
	if r.Shown != "" {
		b = appendField(b, "shown", r.Shown)
	}
	if r.ID != "" {
		b = appendField(b, "id", r.ID)
	}
	if r.By != "" {
		b = appendField(b, "by", r.By)
	}
	return append(b, "}\n"...)
}

func appendField(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD,
// as encoding/json does, so every line decodes.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xF])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// maxDecoded bounds what Decode inflates: a part is written at most a few
// MiB raw (Config.MaxPartBytes), so anything far larger is not ours.
const maxDecoded = 256 << 20

// maxLine bounds one line: a record is a few hundred bytes.
const maxLine = 64 << 10

// Encode builds an object: h (Records set to records), then the records
// as appendLine wrote them, in chunks of whole lines.
func Encode(h Header, lines [][]byte, records int) ([]byte, error) {
	h.Version, h.Records = formatVersion, records
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	zw.Write(hb)
	zw.Write([]byte{'\n'})
	for _, c := range lines {
		zw.Write(c)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// EncodeRecords is Encode for records in hand (tests, tools).
func EncodeRecords(h Header, recs []Record) ([]byte, error) {
	var lines []byte
	for i := range recs {
		lines = appendLine(lines, &recs[i])
	}
	return Encode(h, [][]byte{lines}, len(recs))
}

// Decode reads an object: its header and records, each checked (a known
// decision, the header's room, a time). Anything else — not gzip, too
// large, a bad line, fewer or more records than the header says — is
// ErrBadObject.
func Decode(b []byte) (Header, []Record, error) {
	bad := func(format string, a ...any) (Header, []Record, error) {
		return Header{}, nil, fmt.Errorf("%w: "+format, append([]any{ErrBadObject}, a...)...)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return bad("%v", err)
	}
	sc := bufio.NewScanner(io.LimitReader(zr, maxDecoded))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return bad("header: %v", err)
		}
		return bad("empty")
	}
	var h Header
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
		return bad("header: %v", err)
	}
	if h.Version != formatVersion {
		return bad("version %d, want %d", h.Version, formatVersion)
	}
	if h.Room == "" || h.Records < 0 || h.Lost < 0 {
		return bad("header: room %q, records %d, lost %d", h.Room, h.Records, h.Lost)
	}
	recs := make([]Record, 0, min(h.Records, 1<<16))
	for sc.Scan() {
		var rj recordJSON
		if err := json.Unmarshal(sc.Bytes(), &rj); err != nil {
			return bad("record %d: %v", len(recs)+1, err)
		}
		r := rj.Record
		switch {
		case rj.T <= 0:
			return bad("record %d: no time", len(recs)+1)
		case r.Room != h.Room:
			return bad("record %d: room %q in an object of room %q", len(recs)+1, r.Room, h.Room)
		case !r.Decision.Valid():
			return bad("record %d: decision %q", len(recs)+1, r.Decision)
		}
		r.At = time.UnixMilli(rj.T)
		recs = append(recs, r)
		if len(recs) > h.Records {
			return bad("more records than the header's %d", h.Records)
		}
	}
	if err := sc.Err(); err != nil {
		return bad("%v", err)
	}
	if err := zr.Close(); err != nil {
		return bad("%v", err)
	}
	if len(recs) != h.Records {
		return bad("%d records, header says %d (truncated?)", len(recs), h.Records)
	}
	return h, recs, nil
}
