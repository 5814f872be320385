package edge

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Handshake rejection codes: the "code" of the coded JSON error a refused
// handshake answers with, and the label of the rejection metric.
const (
	// CodeUnauthorized: the token is missing, malformed, badly signed or expired.
	CodeUnauthorized = "unauthorized"
	// CodeTokenEpoch: the token's epoch secret is unknown here (too old, or
	// this node has not fetched it yet); get a new entry.
	CodeTokenEpoch = "token_epoch"
	// CodeWrongNode: the token was not issued for this node's address.
	CodeWrongNode = "wrong_node"
	// CodeBadRequest: a bad last id, an invalid room, or not a WebSocket
	// handshake.
	CodeBadRequest = "bad_request"
	// CodeOverCapacity: the node holds MaxConns connections; try the next
	// address.
	CodeOverCapacity = "over_capacity"
	// CodeDraining: the node is shutting down; try the next address.
	CodeDraining = "draining"
	// CodeUnavailable: the room's stream could not be opened.
	CodeUnavailable = "unavailable"
	// CodeTokenInURL: the handshake carried the token in its query; tokens
	// go in the first frame or an Authorization header, never in a URL.
	CodeTokenInURL = "token_in_url"
	// CodeProtocolUnsupported: the handshake's proto is below the edge's
	// MinProtocol; the message names the minimum (update the SDK).
	CodeProtocolUnsupported = "protocol_unsupported"
	// CodeBadProtocol: the handshake's proto is not a whole number 1-999.
	CodeBadProtocol = "bad_protocol"
	// CodeBadHello: a browser's first frame was not a valid hello.
	CodeBadHello = "bad_hello"
	// CodeHelloTimeout: a browser sent no first frame in time.
	CodeHelloTimeout = "hello_timeout"
	// CodeOrigin: the browser's Origin is not allowed.
	CodeOrigin = "origin"
	// CodeConnectRate: the node takes no more new connections this
	// second; retry after the Retry-After delay (jittered), or try the
	// next address.
	CodeConnectRate = "connect_rate"
	// CodeTooManyConns: the token's user holds MaxConnsPerUser connections
	// on this node already.
	CodeTooManyConns = "too_many_conns"
	// CodeRoomFull: the room holds MaxRoomConns connections on this node;
	// try the next address.
	CodeRoomFull = "room_full"
	// CodeHelloWaits: MaxHelloWaits sockets wait for their hello on this
	// node; retry after the Retry-After delay, or try the next address.
	CodeHelloWaits = "hello_waits"
	// CodeHelloWaitsAddr: MaxHelloWaitsPerAddr sockets from the client's
	// address wait for their hello; retry after the Retry-After delay.
	CodeHelloWaitsAddr = "hello_waits_addr"
)

var rejectCodes = []string{CodeUnauthorized, CodeTokenEpoch, CodeWrongNode, CodeBadRequest, CodeOverCapacity, CodeDraining, CodeUnavailable, CodeTokenInURL, CodeBadHello, CodeHelloTimeout, CodeOrigin, CodeConnectRate, CodeTooManyConns, CodeRoomFull, CodeHelloWaits, CodeHelloWaitsAddr, CodeBanned}

// Close reasons, the label of the closes metric.
const (
	reasonResume   = "resume"
	reasonGap      = "resume_gap" // the resume point was trimmed
	reasonDraining = "draining"
	reasonPolicy   = "policy"
	reasonGone     = "gone" // the client left, died or failed a write
	reasonEnded    = "room_ended"
	reasonExpired  = "token_expired"
)

type metrics struct {
	framesSent   prometheus.Counter
	messagesSent prometheus.Counter
	slow         prometheus.Counter
	rejects      *prometheus.CounterVec
	closes       *prometheus.CounterVec
	// Token lifetime: asks sent, connections closed for an expired token,
	// fresh tokens taken in-band by outcome (ok, refused, stale).
	tokenAsks, tokenExpired prometheus.Counter
	tokenRefreshes          *prometheus.CounterVec
	// site counts site-wide broadcast messages offered to connections,
	// and skipped when its socket held siteQueueSize frames unwritten (the segments carry them).
	site                     *prometheus.CounterVec
	siteOffered, siteSkipped prometheus.Counter // site's two children
	catchUp                  *prometheus.CounterVec
	readErrors               prometheus.Counter
	renderDrops              prometheus.Counter
	heldSends                prometheus.Counter
	badReports               prometheus.Counter
	// The clients' view of the service levels (report_slo.go):
	// danmaku_client_first_polls_total and the latency histogram, by
	// event and room.
	firstPolls     *prometheus.CounterVec
	latency        *latencyHist
	skew           *latencyHist // display skew, danmaku_client_display_skew_seconds
	reportsRefused *prometheus.CounterVec
	// fanout is how long one room frame takes to be written to every
	// connection: the edge's share of a gift's latency.
	fanout prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		framesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_frames_sent_total",
			Help: "WebSocket frames written to clients (live and catch-up).",
		}),
		messagesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_messages_sent_total",
			Help: "Messages written to clients, counted once per connection.",
		}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_slow_disconnects_total",
			Help: "Connections closed with the resume code because their socket held QueueSize frames unwritten.",
		}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_edge_handshake_rejections_total",
			Help: "Refused WebSocket handshakes, by error code.",
		}, []string{"code"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_edge_closes_total",
			Help: "Closed connections, by reason (resume, resume_gap, draining, policy, room_ended, token_expired, banned, gone).",
		}, []string{"reason"}),
		site: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_edge_site_messages_total",
			Help: "Site-wide broadcast messages by outcome: offered to a connection, or skipped when its socket was behind (the room's segments carry them).",
		}, []string{"outcome"}),
		tokenAsks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_token_asks_total",
			Help: "Connections asked in-band for a fresh token (theirs expires within two ping intervals).",
		}),
		tokenExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_token_expired_total",
			Help: "Connections closed (4401) because their token expired and no fresh one came within the grace.",
		}),
		tokenRefreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_edge_token_refreshes_total",
			Help: "Fresh tokens sent in-band, by outcome: ok, refused (invalid, or another user or room), stale (expires no later).",
		}, []string{"outcome"}),
		catchUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_edge_catchup_messages_total",
			Help: "Messages sent to resuming clients, by source (ring or store).",
		}, []string{"source"}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_store_read_errors_total",
			Help: "Failed reads of a room's live stream (retried with backoff).",
		}),
		renderDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_client_render_drops_total",
			Help: "Messages the SDK dropped from its render queue, as reported by clients.",
		}),
		heldSends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_client_held_sends_total",
			Help: "Sends the SDK held back or suppressed by its client-side throttle, as reported by clients.",
		}),
		badReports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "danmaku_edge_client_bad_reports_total",
			Help: "Client messages that were not a valid counter report (ignored when well-formed, else the connection is closed).",
		}),
		firstPolls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_client_first_polls_total",
			Help: "Segments clients fetched, by outcome of their first request: hit (found) or miss (asked early, or a wrong object first), event and room, as reported by clients.",
		}, []string{"outcome", "event", "room"}),
		latency: newLatencyHist(), skew: newSkewHist(),
		reportsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_edge_client_reports_refused_total",
			Help: "Well-formed client counter reports not added to the client metrics, by reason: over_bound (more than the connection can have dropped or held back since its last report, Config.ReportRate), too_often (sooner than Config.ReportEvery after its last).",
		}, []string{"reason"}),
		fanout: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "danmaku_edge_fanout_seconds",
			Help:    "Time to write one room batch to every connection of the room on this node.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}),
	}
	for _, c := range rejectCodes {
		m.rejects.WithLabelValues(c)
	}
	m.siteOffered = m.site.WithLabelValues("offered")
	m.siteSkipped = m.site.WithLabelValues("skipped")
	for _, o := range []string{"ok", "refused", "stale"} {
		m.tokenRefreshes.WithLabelValues(o)
	}
	for _, r := range []string{reasonResume, reasonGap, reasonDraining, reasonPolicy, reasonGone, reasonEnded, reasonExpired, reasonBanned} {
		m.closes.WithLabelValues(r)
	}
	for _, r := range []string{reportOverBound, reportTooOften} {
		m.reportsRefused.WithLabelValues(r)
	}
	m.catchUp.WithLabelValues("ring")
	m.catchUp.WithLabelValues("store")
	cs := []prometheus.Collector{
		m.framesSent, m.messagesSent, m.slow, m.rejects, m.closes, m.catchUp, m.tokenAsks, m.tokenExpired, m.tokenRefreshes, m.site,
		m.readErrors, m.renderDrops, m.heldSends, m.badReports, m.reportsRefused, m.firstPolls, m.latency, m.skew, m.fanout,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "danmaku_edge_connections",
			Help: "Open WebSocket connections, including handshakes in progress.",
		}, func() float64 { return float64(s.conns.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "danmaku_edge_max_connections",
			Help: "The connections this node takes at most (MaxConns, -max-conns; beyond, 503 over_capacity); 0: unlimited.",
		}, func() float64 { return float64(s.cfg.MaxConns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "danmaku_edge_hello_waits",
			Help: "Upgraded sockets waiting for their first frame, the hello (browsers; at most MaxHelloWaits, beyond: 503 hello_waits).",
		}, func() float64 { return float64(s.hellos.n.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "danmaku_edge_load_report_age_seconds",
			Help: "Seconds since this node last wrote its load to the load table (Redis), or since it started while it has not: past the gslb's staleness (1 s) it is no longer handed to viewers, and growing it is cut off from Redis (its live lanes unread too); 0 without a load table.",
		}, func() float64 {
			if r := s.reporter.Load(); r != nil {
				return r.Silence(s.cfg.Clock.Now()).Seconds()
			}
			return 0
		}),
		newRoomConnections(s),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "danmaku_edge_rooms",
			Help: "Rooms with a hub (at least one connection) on this node.",
		}, func() float64 { return float64(s.roomCount()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("edge: register metrics: %w", err)
		}
	}
	return m, nil
}
