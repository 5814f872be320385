package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"danmaku/internal/strictjson"
)

// maxLastLen bounds the last query parameter: "<ms>-<seq>" with 64-bit
// numbers is at most 40 bytes.
const maxLastLen = 48

// errBadLast is returned by parseLast.
var errBadLast = errors.New("edge: bad last id")

// parseLast parses the optional last query parameter: the id of the last
// message the client received. ok is false when it is absent.
func parseLast(s string) (id msgID, ok bool, err error) {
	if s == "" {
		return msgID{}, false, nil
	}
	if len(s) > maxLastLen {
		return msgID{}, false, fmt.Errorf("%w: too long", errBadLast)
	}
	id, err = parseMsgID(s)
	if err != nil {
		return msgID{}, false, fmt.Errorf("%w: %q", errBadLast, s)
	}
	return id, true, nil
}

// report is what a client may send on the connection: counters of the SDK
// since its previous report, which the edge adds to its metrics so that
// client-side drops are visible on the server (text frame, JSON):
//
//	{"drops": 12, "held": 3, "segs": 10, "hits": 10, "lat": [0,0,4,…]}
//
// Names are exact and none may repeat (strictjson.CheckJSON, as for a request
// body); other members are ignored so that the SDK can add counters first.
type report struct {
	// Drops is messages dropped from the render queue.
	Drops uint32 `json:"drops"`
	// Held is sends held back or suppressed by the client-side throttle.
	Held uint32 `json:"held"`
	// Token is a fresh dynamic token for the same user and room, sent
	// in-band when the client's refreshed its entry (or the edge asked,
	// tokenAsk): the connection lives on without reconnecting.
	Token string `json:"token,omitempty"`
	// Segs is segments the client fetched, Hits those of them its first
	// request found (≤ Segs), Lat the barrage it delivered to the app by
	// latency (report_slo.go, checkSLOFields).
	Segs uint32        `json:"segs"`
	Hits uint32        `json:"hits"`
	Lat  latencyCounts `json:"lat,omitzero"`
	// Skew is the display skew of a client synchronised to its video's
	// playhead, in the latency buckets (absent from other clients).
	Skew latencyCounts `json:"skew,omitzero"`
}

// maxReportCount bounds one counter of one report: no client renders or
// sends anywhere near this between two reports, so more is a lie that would
// poison the metric.
const maxReportCount = 1_000_000

var (
	errBadReport = errors.New("edge: bad client report")
	// errReportSyntax: not JSON, or not valid UTF-8 — the client broke the
	// protocol, unlike a well-formed report with a value out of range.
	errReportSyntax = fmt.Errorf("%w: not JSON", errBadReport)
)

// parseReport decodes a client's counter report.
func parseReport(b []byte) (report, error) {
	var r report
	if !utf8.Valid(b) {
		return r, errReportSyntax
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		if json.Valid(b) {
			return r, fmt.Errorf("%w: not a JSON object", errBadReport)
		}
		return r, errReportSyntax
	}
	if err := strictjson.CheckJSON(b, &r, false); err != nil {
		// {"DROPS":…} or a counter twice breaks the protocol as surely as
		// a syntax error: encoding/json would read one of our names in it.
		return report{}, fmt.Errorf("%w: %v", errReportSyntax, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return report{}, fmt.Errorf("%w: %v", errReportSyntax, err)
		}
		return report{}, fmt.Errorf("%w: %v", errBadReport, err)
	}
	if r.Drops > maxReportCount || r.Held > maxReportCount {
		return report{}, fmt.Errorf("%w: counter out of range", errBadReport)
	}
	if len(r.Token) > maxTokenLen {
		return report{}, fmt.Errorf("%w: token too long", errBadReport)
	}
	if err := checkSLOFields(&r); err != nil {
		return report{}, err
	}
	return r, nil
}

// Why a well-formed counter report is not added to the metrics: the
// reason label of danmaku_edge_client_reports_refused_total.
const (
	reportOverBound = "over_bound"
	reportTooOften  = "too_often"
)

// reportCap is the most a connection's reports may add at once: a full
// window at ReportRate.
func (s *Server) reportCap() float32 {
	return float32(s.cfg.ReportRate * s.cfg.ReportWindow.Seconds())
}

// takeReport decides whether a counter report r, arriving at now (Unix
// ns, Config.Clock), is added to the client metrics: not within
// ReportEvery of the last one taken, and not above what the connection
// can have dropped or held back since — ReportRate a second, up to
// ReportWindow's worth. A refused report is dropped whole (a client that
// lies about one counter lies about the report) and spends nothing; it
// returns the reason, or "" when r is taken.
func (c *conn) takeReport(r report, now int64) string {
	cfg := &c.s.cfg
	if c.reportAt != 0 && now-c.reportAt < int64(cfg.ReportEvery) {
		return reportTooOften
	}
	if el := now - c.creditAt; el > 0 {
		c.reportCredit = min(c.s.reportCap(), c.reportCredit+float32(float64(el)/1e9*cfg.ReportRate))
		c.creditAt = now
	}
	n := float32(r.Drops) + float32(r.Held)
	if n > c.reportCredit {
		return reportOverBound
	}
	c.reportCredit -= n
	c.reportAt = now
	return ""
}

// tokenAsk is the text frame an edge sends a connection whose token is
// about to expire: fetch a new entry and send its token in-band
// ({"token": ...}) before exp_ms plus the grace, or be closed with 4401.
type tokenAsk struct {
	Refresh string `json:"refresh"` // "token"
	ExpMs   int64  `json:"exp_ms"`
}
