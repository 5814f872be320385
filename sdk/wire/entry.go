package wire

import (
	"danmaku/sdk/jsonx"
	"strconv"
)

// Entry is the answer of the gslb's GET /v1/entry (docs/api.md): where a
// client sends, where it listens, its dynamic token and the server's timing.
// The gslb writes it and the SDK reads it, so both use this one definition.
type Entry struct {
	Room string `json:"room"`
	User string `json:"user"`
	// Role is "viewer", "host" or "admin".
	Role string `json:"role"`
	// Ingest and Edge are sorted best first, fallbacks after.
	Ingest []string `json:"ingest"`
	Edge   []string `json:"edge"`
	// CDN is the base URL segment keys are appended to.
	CDN string `json:"cdn"`
	// Token is the dynamic token for the ingest and the edge.
	Token          string `json:"token"`
	TokenExpiresMs int64  `json:"token_expires_ms"`
	ServerTimeMs   int64  `json:"server_time_ms"`
	SegmentMs      int64  `json:"segment_ms"`
	PublishDelayMs int64  `json:"publish_delay_ms"`
	// RefreshMs is the gslb's hint for when to fetch the next entry, in
	// milliseconds after ServerTimeMs; absent when the gslb runs without
	// rate limits, and then the client keeps its own rule. It lets a gslb
	// near its limits stretch and spread a crowd's refreshes
	// (docs/api-limits.md).
	RefreshMs int64 `json:"refresh_ms,omitempty"`
	// Degraded says the request came near a rate limit: the answer is the
	// user's last allocation and token again when the gslb still held
	// them (nothing allocated or signed), and RefreshMs is later.
	Degraded bool `json:"degraded,omitempty"`
	// Sync says the client may hold messages until its video's playhead
	// reaches theirs (docs/api.md, "Playhead time"). Absent: wall-clock
	// mode, whatever the app asked for — the gslb steers a client whose
	// protocol is below its sync minimum there during a show.
	Sync bool `json:"sync,omitempty"`
}

// Protocol is the client protocol this package speaks, sent as the proto
// parameter of the entry request and of the edge handshake: 1 is every
// client before the parameter existed (it sends none), 2 adds the playhead
// time. A server answers a protocol below its minimum with the coded
// refusal protocol_unsupported, naming the minimum.
const Protocol = 2

// MaxProtocol bounds what a server parses as a protocol number.
const MaxProtocol = 999

// AppendJSON appends e as json.Marshal writes it, without reflection: the
// entry answers every viewer's join, hundreds of thousands a second at a
// show's start.
func (e *Entry) AppendJSON(b []byte) []byte {
	b = append(b, `{"room":`...)
	b = jsonx.AppendString(b, e.Room)
	b = append(b, `,"user":`...)
	b = jsonx.AppendString(b, e.User)
	b = append(b, `,"role":`...)
	b = jsonx.AppendString(b, e.Role)
	b = append(b, `,"ingest":`...)
	b = jsonx.AppendStrings(b, e.Ingest)
	b = append(b, `,"edge":`...)
	b = jsonx.AppendStrings(b, e.Edge)
	b = append(b, `,"cdn":`...)
	b = jsonx.AppendString(b, e.CDN)
	b = append(b, `,"token":`...)
	b = jsonx.AppendString(b, e.Token)
	b = append(b, `,"token_expires_ms":`...)
	b = strconv.AppendInt(b, e.TokenExpiresMs, 10)
	b = append(b, `,"server_time_ms":`...)
	b = strconv.AppendInt(b, e.ServerTimeMs, 10)
	b = append(b, `,"segment_ms":`...)
	b = strconv.AppendInt(b, e.SegmentMs, 10)
	b = append(b, `,"publish_delay_ms":`...)
	b = strconv.AppendInt(b, e.PublishDelayMs, 10)
	if e.RefreshMs != 0 {
		b = append(b, `,"refresh_ms":`...)
		b = strconv.AppendInt(b, e.RefreshMs, 10)
	}
	if e.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if e.Sync {
		b = append(b, `,"sync":true`...)
	}
	return append(b, '}')
}
