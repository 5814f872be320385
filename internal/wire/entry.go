package wire

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
}
