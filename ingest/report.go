package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"danmaku/internal/ident"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Viewers report comments; moderators review the most-reported ones of a
// room and act on them (take down, ban the sender, dismiss). A report
// names a message by its identity (kind and id: barrage and the live lane
// have separate id sequences). Reports of one (user, message) count once.
// What a room's reports hold is bounded (ReportBounds) and expires with its
// event (Report.Expires).

// Report reasons a viewer may give.
const (
	ReportSpam    = "spam"
	ReportAbuse   = "abuse"
	ReportIllegal = "illegal"
	ReportOther   = "other"
)

// reportReasons are the valid reasons, in the order answers list them.
var reportReasons = []string{ReportSpam, ReportAbuse, ReportIllegal, ReportOther}

// Review actions.
const (
	// ActionTakedown took the message down (viewers stop showing it).
	ActionTakedown = "takedown"
	// ActionBan banned the message's sender.
	ActionBan = "ban"
	// ActionDismiss found nothing to do.
	ActionDismiss = "dismiss"
)

// ReportBounds bound what a store keeps of one room's reports.
type ReportBounds struct {
	// Messages is how many distinct messages a room's queue holds; a
	// report of a new message when it is full evicts the least-reported
	// one (ties: the oldest id). Zero: 1,000.
	Messages int
	// Reporters is how many distinct reporters of one message are
	// remembered (deduplicated and counted); past it, reports of the
	// message are answered but no longer counted. Zero: 10,000.
	Reporters int
	// History is how many decisions about one sender a room keeps (the
	// review's "earlier decisions"). Zero: 20.
	History int
}

// Default bounds (ReportBounds) and the retention of a room's reports.
const (
	defaultReportMessages  = 1000
	defaultReportReporters = 10_000
	defaultReportHistory   = 20
	// defaultReportRetention is how long a room's reports are kept after
	// its event ends (or, in a room no event names, after its latest
	// report): the moderators' time to finish the queue after the show.
	defaultReportRetention = 24 * time.Hour
	// maxReviewPage bounds one review listing.
	maxReviewPage = 200
	// maxDecisionReasonBytes bounds a moderator's note.
	maxDecisionReasonBytes = 500
)

func (b ReportBounds) withDefaults() ReportBounds {
	if b.Messages <= 0 {
		b.Messages = defaultReportMessages
	}
	if b.Reporters <= 0 {
		b.Reporters = defaultReportReporters
	}
	if b.History <= 0 {
		b.History = defaultReportHistory
	}
	return b
}

// Errors of the report store.
var (
	// ErrBadReport is returned (wrapped) for a report or decision that is
	// not valid: nothing is stored.
	ErrBadReport = errors.New("ingest: bad report")
	// ErrNoReport is returned (wrapped) for a message nobody reported (or
	// whose reports expired or were evicted).
	ErrNoReport = errors.New("ingest: no such report")
)

// ReportedMessage is what is known of a reported message.
type ReportedMessage struct {
	ID   string    `json:"id"`
	Kind wire.Kind `json:"k"`
	// User, Nick and Text are the sender and the text as the room's
	// stream held them when the message was first reported; Known is
	// false when the stream no longer held it (trimmed behind its
	// segment), and they are then empty: the audit trail of the message's
	// minute (its id's time) has them.
	User  string `json:"user,omitempty"`
	Nick  string `json:"nick,omitempty"`
	Text  string `json:"text,omitempty"`
	Known bool   `json:"known"`
}

// Report is one viewer's report.
type Report struct {
	Room string
	// Message is the reported message, with what the ingest found of it.
	Message ReportedMessage
	// Reporter is the reporting user; Reason one of the report reasons.
	Reporter string
	Reason   string
	// At is when it was made.
	At time.Time
	// Expires is when the room's reports may be forgotten: its event's
	// end and the retention.
	Expires time.Time
}

// ReportDecision is what a moderator did about a reported message.
type ReportDecision struct {
	// Action is takedown, ban or dismiss.
	Action string `json:"action"`
	// By is the moderator: a host's or admin's user id, "" for an
	// operator key.
	By string `json:"by,omitempty"`
	// Reason is the moderator's note.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Message names the message decided (in a sender's history).
	ID   string    `json:"id"`
	Kind wire.Kind `json:"k"`
	// Ban is the ban set by a ban decision.
	Ban *Ban `json:"ban,omitempty"`
}

// ReportItem is one reported message in the review queue.
type ReportItem struct {
	ReportedMessage
	// Count is how many distinct users reported it.
	Count int64 `json:"count"`
	// Reasons counts the reports by reason.
	Reasons map[string]int64 `json:"reasons"`
	// First and Last are the first and latest report's times.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Decision is the latest decision about it (nil: none yet).
	Decision *ReportDecision `json:"decision,omitempty"`
}

// ReportAdded is what Add did with a report.
type ReportAdded struct {
	// Duplicate: the user had reported the message already; nothing
	// changed.
	Duplicate bool
	// Uncounted: the message has as many reporters as the store
	// remembers; the report changed nothing.
	Uncounted bool
	// Evicted: a new message took the place of the least-reported one of
	// a full room.
	Evicted bool
}

// ReportStore keeps each room's reports, shared by every ingest node.
// Implementations are safe for concurrent use.
type ReportStore interface {
	// Add records r (validated): the first report of r.Reporter about the
	// message counts, later ones are Duplicate. The room's reports are
	// kept until r.Expires.
	Add(ctx context.Context, r Report) (ReportAdded, error)
	// Top returns at most n of room's reported messages, the most
	// reported first (ties: the later id first).
	Top(ctx context.Context, room string, n int) ([]ReportItem, error)
	// Get returns one reported message, ErrNoReport if none.
	Get(ctx context.Context, room string, kind wire.Kind, id string) (ReportItem, error)
	// Decide records d about a reported message (ErrNoReport if none) and
	// in its sender's history, and returns the item. The same action
	// again (a retry) changes nothing and returns the item as it stands.
	Decide(ctx context.Context, room string, kind wire.Kind, id string, d ReportDecision) (ReportItem, error)
	// History returns the decisions about user's messages in room, the
	// latest first.
	History(ctx context.Context, room, user string) ([]ReportDecision, error)
}

// CheckReportRef checks a reported message's identity: a kind of the wire
// and an id as the streams spell it ("<ms>-<seq>", ms > 0).
func CheckReportRef(room string, kind wire.Kind, id string) error {
	if !wire.ValidRoom(room) {
		return fmt.Errorf("%w: room %q: 1-64 of A-Z a-z 0-9 _ -", ErrBadReport, room)
	}
	if kind != wire.KindBarrage && kind != wire.KindGift && kind != wire.KindSystem {
		return fmt.Errorf("%w: k must be 1 (barrage), 2 (gift) or 3 (system), got %d", ErrBadReport, kind)
	}
	ms, seq, err := wire.ParseID(id)
	if err != nil || ms <= 0 || wire.FormatID(ms, seq) != id {
		return fmt.Errorf("%w: id must be a message id \"<ms>-<seq>\"", ErrBadReport)
	}
	return nil
}

// validReason reports whether s is a report reason.
func validReason(s string) bool { return slices.Contains(reportReasons, s) }

// Validate checks r.
func (r *Report) Validate() error {
	if err := CheckReportRef(r.Room, r.Message.Kind, r.Message.ID); err != nil {
		return err
	}
	switch {
	case ident.CheckUser(r.Reporter) != nil:
		return fmt.Errorf("%w: reporter: not a user id", ErrBadReport)
	case !validReason(r.Reason):
		return fmt.Errorf("%w: reason must be one of %s", ErrBadReport, strings.Join(reportReasons, ", "))
	case r.At.IsZero() || !r.Expires.After(r.At):
		return fmt.Errorf("%w: expires must be after at", ErrBadReport)
	}
	return nil
}

// Validate checks d.
func (d *ReportDecision) Validate() error {
	switch {
	case d.Action != ActionTakedown && d.Action != ActionBan && d.Action != ActionDismiss:
		return fmt.Errorf("%w: action must be takedown, ban or dismiss", ErrBadReport)
	case len(d.Reason) > maxDecisionReasonBytes:
		return fmt.Errorf("%w: reason: at most %d bytes", ErrBadReport, maxDecisionReasonBytes)
	case d.Reason != ident.CleanText(d.Reason):
		return fmt.Errorf("%w: reason: control or format characters", ErrBadReport)
	case d.At.IsZero():
		return fmt.Errorf("%w: a decision needs its time", ErrBadReport)
	}
	return nil
}

// reportMember names a message within its room's reports: "k:id".
func reportMember(kind wire.Kind, id string) string {
	return fmt.Sprintf("%d:%s", kind, id)
}

// reportOrder sorts items the most reported first, ties the later id
// first (as Redis orders a sorted set's equal scores, by member, reversed).
func reportOrder(a, b ReportItem) int {
	if a.Count != b.Count {
		if a.Count > b.Count {
			return -1
		}
		return 1
	}
	return strings.Compare(reportMember(b.Kind, b.ID), reportMember(a.Kind, a.ID))
}

// lookupMessage returns message id of room's lane for kind if the stream
// still holds it: one Read after its predecessor.
func lookupMessage(ctx context.Context, streams stream.Store, room string, kind wire.Kind, id string) (wire.Message, bool, error) {
	ms, seq, err := wire.ParseID(id)
	if err != nil {
		return wire.Message{}, false, err
	}
	var after string
	if seq > 0 {
		after = wire.FormatID(ms, seq-1)
	} else {
		after = wire.FormatID(ms-1, math.MaxUint64)
	}
	lane := stream.Live
	if kind == wire.KindBarrage {
		lane = stream.Barrage
	}
	got, err := streams.Read(ctx, stream.Key{Room: room, Lane: lane}, after, 1, 0)
	if err != nil {
		return wire.Message{}, false, err
	}
	if len(got) == 0 || got[0].ID != id || got[0].Kind != kind {
		return wire.Message{}, false, nil
	}
	return got[0], true, nil
}
