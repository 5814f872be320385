package ingest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/ident"
	"danmaku/sdk/wire"
)

// Defaults of a viewer's report allowance (Config.ReportBurst and
// ReportEvery): five reports at once, then one every 12 s — a viewer
// flagging a burst of spam is never refused, a script reporting every
// comment is.
const (
	defaultReportBurst = 5
	defaultReportEvery = 12 * time.Second
)

// reportBody is the body of POST /v1/rooms/{room}/reports.
type reportBody struct {
	ID     *string `json:"id"`
	Kind   *int    `json:"k"`
	Reason string  `json:"reason"`
}

// reportMetrics counts reports by result.
func reportMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_reports_total",
		Help: "Viewers' reports of comments, by result: counted, duplicate (the user reported the message already), uncounted (the message's reporters are at their bound), rate (over the user's allowance), evicted (a new message took a full room's least-reported one's place).",
	}, []string{"result"})
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// report is POST /v1/rooms/{room}/reports: a viewer reports a message of
// the room. Checked as barrage is (token, primary node, live room), then
// the body, then the user's allowance.
func (s *Server) report(c *gin.Context) {
	claims, good := s.authorize(c)
	if !good {
		return
	}
	now := s.cfg.Clock.Now()
	if v := s.binding.Check(claims, now); !v.Allowed() {
		s.reject(c, "auth", v.refusal())
		return
	}
	room := claims.Room
	if !s.live(c, room) {
		return
	}
	var b reportBody
	if e := httpx.BindJSON(c, s.cfg.MaxBody, &b); e != nil {
		s.reject(c, "input", e)
		return
	}
	if b.ID == nil || b.Kind == nil {
		s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "bad_report", `a report needs "id", "k" and "reason"`))
		return
	}
	kind := wire.Kind(*b.Kind)
	if *b.Kind < 0 || *b.Kind > 255 {
		kind = 0
	}
	if err := CheckReportRef(room, kind, *b.ID); err != nil {
		s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "bad_report", "%v", err))
		return
	}
	if !validReason(b.Reason) {
		s.reject(c, "input", httpx.Errorf(http.StatusBadRequest, "bad_report", `reason must be one of "spam", "abuse", "illegal", "other"`))
		return
	}
	if !s.reportBucket.TakeWith(claims.User(), now, s.cfg.ReportBurst, 1/s.cfg.ReportEvery.Seconds(), 1) {
		s.reportCounts.WithLabelValues("rate").Inc()
		e := httpx.Errorf(http.StatusTooManyRequests, "report_rate", "at most %g reports at once, then one every %v; retry later", s.cfg.ReportBurst, s.cfg.ReportEvery)
		e.RetryAfter = s.cfg.ReportEvery
		s.reject(c, "gateway", e)
		return
	}
	ctx := c.Request.Context()
	msg := ReportedMessage{ID: *b.ID, Kind: kind}
	if m, ok, err := lookupMessage(ctx, s.cfg.Streams, room, kind, *b.ID); err != nil {
		// The report stands without the text: the trail has it.
		s.cfg.Logger.Warn("ingest: reported message not looked up", "room", room, "id", *b.ID, "err", err)
	} else if ok {
		msg.User, msg.Nick, msg.Text, msg.Known = m.User, m.Nick, m.Text, true
	}
	added, err := s.cfg.Reports.Add(ctx, Report{Room: room, Message: msg, Reporter: claims.User(), Reason: b.Reason, At: now, Expires: s.reportExpiry(room, now)})
	if err != nil {
		s.backendError(c, "add report", err)
		return
	}
	if added.Evicted {
		s.reportCounts.WithLabelValues("evicted").Inc()
	}
	switch {
	case added.Duplicate:
		s.reportCounts.WithLabelValues("duplicate").Inc()
		c.JSON(http.StatusOK, gin.H{"ok": true, "duplicate": true})
	case added.Uncounted:
		s.reportCounts.WithLabelValues("uncounted").Inc()
		c.JSON(http.StatusAccepted, ok)
	default:
		s.reportCounts.WithLabelValues("counted").Inc()
		c.JSON(http.StatusAccepted, ok)
	}
}

// reportExpiry is when room's reports may go: its event's end and the
// retention, or (no event) the retention from now.
func (s *Server) reportExpiry(room string, now time.Time) time.Time {
	return reportExpiry(s.cfg.Events, room, now)
}

func reportExpiry(events *event.Directory, room string, now time.Time) time.Time {
	if events != nil {
		if v, ok := events.Lookup(room); ok {
			if end := v.Event.EndTime().Add(defaultReportRetention); end.After(now) {
				return end
			}
		}
	}
	return now.Add(defaultReportRetention)
}

// ReportStore returns the node's report store, for the review API.
func (s *Server) ReportStore() ReportStore { return s.cfg.Reports }

// TakedownFunc takes a message down in its room on behalf of by (a
// host's or admin's user id, "" for an operator key), for reason: the
// review's takedown. Server.ReviewTakedown is the node's.
type TakedownFunc func(ctx context.Context, room string, kind wire.Kind, id, by, reason string) error

// ReviewTakedown is TakeDown as the review API calls it.
func (s *Server) ReviewTakedown() TakedownFunc {
	return func(ctx context.Context, room string, kind wire.Kind, id, by, reason string) error {
		if by == "" {
			by = takedownByOperator
		}
		_, err := s.TakeDown(ctx, room, wire.TakenDown{ID: id, Kind: kind}, by, reason)
		return err
	}
}

// ReportAPI is the moderators' review queue, on gin, beside the lotteries
// API:
//
//	GET  /v1/admin/rooms/{room}/reports?n=20          → {"reports": [...]} the most reported first
//	POST /v1/admin/rooms/{room}/reports/{id}/{action} body {"k": 1, "reason": "", ban fields} → {"report": {...}}
//
// Each item carries the message (id, k, user, nick, text, known), its
// count, reasons, first and last report, the latest decision, and for a
// known sender the bans in force and the earlier decisions about their
// messages. action is takedown, ban or dismiss; a ban takes the bans API's
// until or ttl_seconds and a scope (room: this room, the default; event:
// this room's event; all: every room — event and all need an operator
// key). Every route needs an operator key or the dynamic token of the
// room's host or an admin, as the lotteries API; every decision is
// recorded on the item, in the sender's history and in the audit trail.
type ReportAPI struct {
	Store ReportStore
	// Bans receives the ban decisions. Required.
	Bans BanStore
	// Takedown takes a message down (Server.ReviewTakedown). Nil:
	// takedown answers 501 takedown_unavailable.
	Takedown TakedownFunc
	// Keys are the operator keys. Empty: only hosts (if Hosts is set).
	Keys []string
	// Hosts verifies hosts' dynamic tokens. Nil: operator keys only.
	Hosts *auth.Keyring
	// Addr is this node's advertised address, checked as LotteryAPI's.
	Addr string
	// Events tells a room's event (a ban of scope event). Nil: none.
	Events *event.Directory
	// Audit records every decision. Nil: not recorded (tests).
	Audit *audit.Recorder
	// Clock stamps decisions and bans. Nil: real clock.
	Clock clock.Clock
	// BansChanged, when set, is called after a ban, so that the process's
	// own BanList reflects it at once.
	BansChanged func(ctx context.Context)
	// Logger receives the store errors. Nil: slog.Default().
	Logger *slog.Logger
}

// ReviewRequest is the body of a review action; every field may be left
// out.
type ReviewRequest struct {
	// Kind is the message's kind. Zero: 1 (barrage).
	Kind wire.Kind `json:"k"`
	// Reason is the moderator's note (a ban's reason too).
	Reason string `json:"reason"`
	// Scope of a ban: "room" (default), "event" or "all".
	Scope string `json:"scope"`
	// Until or TTLSeconds end a ban, as in PUT /v1/admin/bans; neither: a
	// ban without an end.
	Until      time.Time `json:"until"`
	TTLSeconds int64     `json:"ttl_seconds"`
}

// ReviewItem is one entry of the review queue.
type ReviewItem struct {
	ReportItem
	// Bans are the sender's bans in force.
	Bans []Ban `json:"bans"`
	// History is the earlier decisions about the sender's messages in this
	// room, the latest first.
	History []ReportDecision `json:"history"`
}

const (
	defaultReviewPage = 20
	maxReviewBody     = 4 << 10
)

// Register adds the routes to r.
func (a *ReportAPI) Register(r gin.IRoutes) {
	r.GET("/v1/admin/rooms/:room/reports", a.auth, a.list)
	r.POST("/v1/admin/rooms/:room/reports/:id/:action", a.auth, a.decide)
}

func (a *ReportAPI) now() time.Time { return clock.Or(a.Clock).Now() }

// auth admits an operator key, or a host's or admin's token for this room.
func (a *ReportAPI) auth(c *gin.Context) { roomAdminAuth(c, a.Keys, a.Hosts, a.Addr, "reports") }

func (a *ReportAPI) fail(c *gin.Context, op string, err error) {
	switch {
	case errors.Is(err, ErrBadReport):
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_report", "%v", err))
	case errors.Is(err, ErrNoReport):
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, "no_such_report", "%v", err))
	default:
		backendUnavailable(c, a.Logger, "reports store unavailable", op, err)
	}
}

func (a *ReportAPI) list(c *gin.Context) {
	room := c.Param("room")
	if !wire.ValidRoom(room) {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_room", "room must be 1-64 characters of A-Z a-z 0-9 _ -"))
		return
	}
	n := defaultReviewPage
	if s := c.Query("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > maxReviewPage {
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_count", "n must be 1-%d", maxReviewPage))
			return
		}
		n = v
	}
	ctx := c.Request.Context()
	items, err := a.Store.Top(ctx, room, n)
	if err != nil {
		a.fail(c, "list reports", err)
		return
	}
	out := make([]ReviewItem, 0, len(items))
	now := a.now()
	for _, it := range items {
		ri, err := a.context(ctx, room, it, now)
		if err != nil {
			a.fail(c, "report context", err)
			return
		}
		out = append(out, ri)
	}
	c.JSON(http.StatusOK, gin.H{"reports": out})
}

// context adds the sender's bans in force and history to it.
func (a *ReportAPI) context(ctx context.Context, room string, it ReportItem, now time.Time) (ReviewItem, error) {
	ri := ReviewItem{ReportItem: it, Bans: []Ban{}, History: []ReportDecision{}}
	if it.User == "" {
		return ri, nil
	}
	bans, err := a.Bans.User(ctx, it.User)
	if err != nil {
		return ReviewItem{}, err
	}
	for _, b := range bans {
		if b.Active(now) {
			ri.Bans = append(ri.Bans, b)
		}
	}
	if ri.History, err = a.Store.History(ctx, room, it.User); err != nil {
		return ReviewItem{}, err
	}
	return ri, nil
}

func (a *ReportAPI) decide(c *gin.Context) {
	room, id, action := c.Param("room"), c.Param("id"), c.Param("action")
	if action != ActionTakedown && action != ActionBan && action != ActionDismiss {
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, "not_found", "the actions are takedown, ban and dismiss"))
		return
	}
	var req ReviewRequest
	if c.Request.ContentLength != 0 {
		if e := httpx.BindJSON(c, maxReviewBody, &req); e != nil {
			httpx.Abort(c, e)
			return
		}
	}
	if req.Kind == 0 {
		req.Kind = wire.KindBarrage
	}
	// The note is cleaned as a ban's reason is (shown to operators).
	req.Reason = ident.CleanText(req.Reason)
	if err := CheckReportRef(room, req.Kind, id); err != nil {
		a.fail(c, "decide report", err)
		return
	}
	ctx := c.Request.Context()
	now := a.now().Truncate(time.Millisecond)
	by := c.GetString(hostKey)
	d := ReportDecision{Action: action, By: by, Reason: req.Reason, At: now}
	if err := d.Validate(); err != nil {
		a.fail(c, "decide report", err)
		return
	}
	// The request's own faults first, then the message's state.
	var br BanRequest
	if action == ActionBan {
		var e *httpx.Error
		if br, e = a.banRequest(c, room, &req, now); e != nil {
			httpx.Abort(c, e)
			return
		}
	}
	it, err := a.Store.Get(ctx, room, req.Kind, id)
	if err != nil {
		a.fail(c, "get report", err)
		return
	}
	switch action {
	case ActionBan:
		if it.User == "" {
			httpx.Abort(c, httpx.Errorf(http.StatusConflict, "sender_unknown", "the message's sender is not known (the stream no longer held it when it was reported); ban the user through the bans API"))
			return
		}
		b, e := br.ban(it.User, now)
		if e != nil {
			httpx.Abort(c, e)
			return
		}
		if err := a.Bans.Put(ctx, b); err != nil {
			backendUnavailable(c, a.Logger, "bans store unavailable; nothing changed", "put ban", err)
			return
		}
		if a.BansChanged != nil {
			a.BansChanged(ctx)
		}
		d.Ban = &b
	case ActionTakedown:
		if a.Takedown == nil {
			httpx.Abort(c, httpx.Errorf(http.StatusNotImplemented, "takedown_unavailable", "this node cannot take messages down"))
			return
		}
		if err := a.Takedown(ctx, room, req.Kind, id, by, req.Reason); err != nil {
			var re *event.RoomError
			if e, ok := takedownError(err); ok {
				httpx.Abort(c, e)
			} else if errors.As(err, &re) {
				httpx.Abort(c, event.RoomHTTPError(err))
			} else {
				backendUnavailable(c, a.Logger, "takedown failed; retry", "take down", err)
			}
			return
		}
	}
	it, err = a.Store.Decide(ctx, room, req.Kind, id, d)
	if err != nil {
		a.fail(c, "decide report", err)
		return
	}
	if a.Audit != nil {
		a.Audit.Record(audit.Record{At: now, Room: room, User: it.User, Text: it.Text, Decision: audit.Reviewed, Reason: "report_" + action, ID: id, By: by})
	}
	ri, err := a.context(ctx, room, it, a.now())
	if err != nil {
		a.fail(c, "report context", err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"report": ri})
}

// banRequest is the ban a review asks for, as a BanRequest with its
// scope and end checked (the user is the message's sender, known later),
// or the answer refusing it.
func (a *ReportAPI) banRequest(c *gin.Context, room string, req *ReviewRequest, now time.Time) (BanRequest, *httpx.Error) {
	br := BanRequest{Until: req.Until, TTLSeconds: req.TTLSeconds, Reason: req.Reason}
	operator := c.GetString(hostKey) == "" && httpx.KeyMatches(c, a.Keys)
	switch req.Scope {
	case "", "room":
		br.Room = room
	case "event", "all":
		if !operator {
			return BanRequest{}, httpx.Errorf(http.StatusForbidden, "forbidden", "a host or admin bans from this room only; scope %q needs an operator key", req.Scope)
		}
		if req.Scope == "event" {
			if br.Event = a.eventOf(room); br.Event == "" {
				return BanRequest{}, httpx.Errorf(http.StatusBadRequest, "bad_ban", "room %s belongs to no event", room)
			}
		}
	default:
		return BanRequest{}, httpx.Errorf(http.StatusBadRequest, "bad_ban", `scope must be "room", "event" or "all"`)
	}
	// The end and reason checked now, for a user id any ticket may carry.
	if _, e := br.ban("placeholder", now); e != nil {
		return BanRequest{}, e
	}
	return br, nil
}

func (a *ReportAPI) eventOf(room string) string {
	if a.Events == nil {
		return ""
	}
	return a.Events.EventOf(room)
}
