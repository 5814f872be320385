package mobile

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"danmaku/sdk"
)

// Message kinds (Message.Kind).
const (
	// KindBarrage is a viewer's comment.
	KindBarrage = int(sdk.KindBarrage)
	// KindGift is a paid gift.
	KindGift = int(sdk.KindGift)
	// KindSystem is a host/admin announcement or a site-wide broadcast.
	KindSystem = int(sdk.KindSystem)
	// KindTakedown is not a message to show but a notice: a moderator took
	// down the message whose id is ID and kind TargetKind, which this
	// client delivered. Remove it from the screen if it is still there.
	// Next returns one only for a message on screen; OnMessage gets one
	// for every delivered message taken down, after that message.
	KindTakedown = int(sdk.KindTakedown)
)

// Client states (Listener.OnState). Typed int, like the parameter, so that
// Swift compares them without a conversion.
const (
	// StateJoining: Start was called; the client is fetching the entry.
	StateJoining int = 1
	// StateLive: the client has joined the room and receives its messages.
	StateLive int = 2
	// StateStopped: the client has stopped (Stop, or a failure reported by
	// OnError just before). Nothing is called after it.
	StateStopped int = 3
)

// Error codes (ErrorCode, Listener.OnError). A coded answer of a server has
// the server's own code instead (docs/api.md).
const (
	// ErrCodeConfig: NewClient was given an unusable Config.
	ErrCodeConfig = "config"
	// ErrCodeJoinRefused: the entry endpoint refused the ticket (bad or
	// expired, wrong room). The client has stopped; get a new ticket and
	// make a new Client.
	ErrCodeJoinRefused = "join_refused"
	// ErrCodeClosed: the client was stopped (or Stop was called while the
	// call waited).
	ErrCodeClosed = "closed"
	// ErrCodeAlreadyStarted: Start was called a second time.
	ErrCodeAlreadyStarted = "already_started"
	// ErrCodeEmptyText: the text is empty once whitespace is collapsed.
	ErrCodeEmptyText = "empty_text"
	// ErrCodeTextTooLong: the text is longer than the ingest accepts (60
	// characters).
	ErrCodeTextTooLong = "text_too_long"
	// ErrCodeNoIngest: the entry named no ingest to send to.
	ErrCodeNoIngest = "no_ingest"
	// ErrCodeNetwork: a server could not be reached or did not answer in
	// time.
	ErrCodeNetwork = "network"
	// ErrCodeRoomEnded: the room's event has ended and its last segment was
	// delivered; the client has stopped. Show the end of the show.
	ErrCodeRoomEnded = "room_ended"
	// ErrCodeUnknown: anything else; the error's text says what.
	ErrCodeUnknown = "unknown"
)

// Config configures a Client. EntryURL, Room and Ticket are required; zero
// values of the other fields pick danmaku/sdk's defaults.
type Config struct {
	// EntryURL is the base URL of the entry endpoint, without /v1/entry,
	// e.g. "https://entry.example.com".
	EntryURL string
	// Room is the room to join.
	Room string
	// Ticket is the business ticket from the app's login.
	Ticket string

	// FirstJoinJitterMs bounds the random wait before the first join, in
	// milliseconds. Zero: danmaku/sdk's default (Config.FirstJoinJitter).
	FirstJoinJitterMs int64

	// RenderVisible is how many messages may be on screen at once. Zero: 32.
	RenderVisible int
	// RenderBuffer is how many messages may wait for a free place on
	// screen. Zero: 120.
	RenderBuffer int
	// RenderDisplayMs is how long a message stays on screen once Next has
	// handed it out: the renderer's animation time. Zero: 8000.
	RenderDisplayMs int64

	// Playhead, when set, is the app's video playhead: each comment is sent
	// with it, and messages are shown when the video reaches the moment
	// their sender reacted to (docs/mobile.md, "In step with the video").
	// Nil: by the wall clock.
	Playhead PlayheadClock
}

// PlayheadClock is the app's video player. PlayheadMs returns the program
// date time (unix ms) of the frame on screen — AVPlayer's
// currentItem.currentDate(), ExoPlayer's window start plus position — or 0
// (or less) while the player does not know it; the client then runs by the
// wall clock until it does.
type PlayheadClock interface {
	PlayheadMs() int64
}

// PlayheadStats are the playhead synchronisation's counters (sdk.PlayheadStats).
type PlayheadStats struct {
	Held, Late, Skipped, Early, Fallbacks, Jumps, Waiting int64
	// SkewP50Ms and SkewP99Ms: how long after their moment messages were
	// shown.
	SkewP50Ms, SkewP99Ms int64
}

// Message is one comment, gift or announcement.
type Message struct {
	// ID identifies the message within its kind's lane: barrage ids and
	// gift/system ids are separate sequences.
	ID string
	// Kind is KindBarrage, KindGift or KindSystem, or KindTakedown for a
	// takedown notice (never shown: it removes the message it names). Treat
	// other kinds as barrage.
	Kind int
	// TargetKind is, in a KindTakedown notice, the kind of the message to
	// remove (its ID is ID); 0 otherwise.
	TargetKind int
	// User is the sender's user id; empty for operator broadcasts.
	User string
	// Nick is the sender's display name.
	Nick string
	// Avatar is a short avatar code the app resolves, not a URL.
	Avatar string
	// Text is the comment or announcement.
	Text string
	// Gift is the gift's code (gifts).
	Gift string
	// Value is the value of one gift in the smallest currency unit (gifts).
	Value int64
	// Count is how many gifts the message stands for; at least 1.
	Count int64
	// Role is the sender's role for system messages ("host", "admin",
	// "ops").
	Role string
	// Merged lists, comma-separated, the ids a merged gift stands for (its
	// own included); empty for a single message.
	Merged string
	// MergedCount is the number of ids in Merged.
	MergedCount int
}

func newMessage(m sdk.Message) *Message {
	if t, ok := sdk.TakedownOf(m); ok {
		return &Message{ID: t.ID, Kind: KindTakedown, TargetKind: int(t.Kind), Count: 1}
	}
	return &Message{
		ID:          m.ID,
		Kind:        int(m.Kind),
		User:        m.User,
		Nick:        m.Nick,
		Avatar:      m.Avatar,
		Text:        m.Text,
		Gift:        m.Gift,
		Value:       m.Value,
		Count:       int64(max(m.Count, 1)),
		Role:        m.Role,
		Merged:      strings.Join(m.Merged, ","),
		MergedCount: len(m.Merged),
	}
}

// Stats are the client's counters and its render queue's (Render*), since
// NewClient. The fields without a comment are danmaku/sdk Stats' fields of
// the same name and meaning.
type Stats struct {
	EntryFetches     int64
	SegmentsFetched  int64
	FirstPollHits    int64
	NotFoundRetries  int64
	MismatchRetries  int64
	LastSegmentLagMs int64
	ClockMarginMs    int64
	FetchErrors      int64
	DecodeErrors     int64
	SeqGaps          int64
	JumpsToLive      int64
	SkippedSeconds   int64
	EdgeConnects     int64
	EdgeReconnects   int64
	EdgeDialErrors   int64
	EdgeBanned       int64
	EdgeFrames       int64
	EdgeDecodeErrors int64
	EdgeTokenAsks    int64
	Delivered        int64
	Duplicates       int64
	DroppedBarrage   int64
	SendsPosted      int64
	SendsDeduped     int64
	SendsDropped     int64
	SendsHeldBack    int64
	SendsFailed      int64

	TakedownsApplied    int64
	TakedownNotices     int64
	TakedownsSuppressed int64
	TakedownLists       int64
	TakedownListErrors  int64

	// RenderPushed counts messages given to the render queue.
	RenderPushed int64
	// RenderShown counts messages handed out by Next.
	RenderShown int64
	// RenderDroppedOverflow counts barrage the queue dropped while shown.
	RenderDroppedOverflow int64
	// RenderDroppedHidden counts barrage the queue dropped while hidden.
	RenderDroppedHidden int64
	// RenderBeyondBuffer counts gifts and system messages queued beyond
	// RenderBuffer (they are never dropped).
	RenderBeyondBuffer int64
	// RenderCollapsedGifts counts gifts folded into a waiting gift while
	// hidden (their counts added: no gift is lost from the totals).
	RenderCollapsedGifts int64
	// RenderRemovedWaiting counts messages taken down while waiting for
	// Next (never shown).
	RenderRemovedWaiting int64
	// RenderRemovedShown counts messages taken down while on screen: Next
	// handed out a KindTakedown notice for each.
	RenderRemovedShown int64
	// RenderWaiting is the number of messages waiting for Next now.
	RenderWaiting int64
}

// Listener receives what happens in the background. Its methods are called
// on a Go-owned thread, one at a time, in order (see the package doc); they
// must return quickly and hop to the UI thread to touch views. The client
// lets go of its listener after OnState(StateStopped), so a listener that
// refers back to the client's owner does not keep it alive once stopped.
type Listener interface {
	// OnState reports StateJoining, StateLive or StateStopped.
	OnState(state int)
	// OnMessage hands over every message the client delivers, in delivery
	// order, as it also enters the render queue. Apps that draw only from
	// Next may ignore it.
	OnMessage(m *Message)
	// OnError reports why the client stopped by itself, with a code of
	// ErrorCode (ErrCodeJoinRefused: get a new ticket). It is called at
	// most once, just before OnState(StateStopped); Stop does not cause it.
	OnError(code string, message string)
}

// Client is one viewer in one room: create it with NewClient, run it with
// Start, end it with Stop.
type Client struct {
	c      *sdk.Client
	q      *sdk.RenderQueue
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	started bool
	stopped bool

	// cbMu makes the callbacks one at a time; live and over say which
	// states were delivered.
	cbMu sync.Mutex
	l    Listener
	live bool
	over bool
}

// NewClient checks cfg and returns a client that has not started. Its errors
// have the code ErrCodeConfig.
func NewClient(cfg *Config) (*Client, error) {
	if cfg == nil {
		return nil, &codedError{ErrCodeConfig, errors.New("mobile: nil Config")}
	}
	q, err := sdk.NewRenderQueue(sdk.RenderConfig{
		Visible: cfg.RenderVisible,
		Buffer:  cfg.RenderBuffer,
		Display: time.Duration(cfg.RenderDisplayMs) * time.Millisecond,
	})
	if err != nil {
		return nil, wrap(err)
	}
	c, err := sdk.New(sdk.Config{
		EntryURL:        cfg.EntryURL,
		Room:            cfg.Room,
		Ticket:          cfg.Ticket,
		FirstJoinJitter: time.Duration(cfg.FirstJoinJitterMs) * time.Millisecond,
		Render:          q,
		Playhead:        playheadOf(cfg.Playhead),
	})
	if err != nil {
		return nil, wrap(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{c: c, q: q, ctx: ctx, cancel: cancel}, nil
}

// Start runs the client in the background and returns at once; listener
// (which may be nil) receives its states, messages and failure. It returns
// an error with ErrCodeAlreadyStarted when called again and ErrCodeClosed
// after Stop.
func (c *Client) Start(listener Listener) error {
	c.mu.Lock()
	switch {
	case c.stopped:
		c.mu.Unlock()
		return &codedError{ErrCodeClosed, sdk.ErrClosed}
	case c.started:
		c.mu.Unlock()
		return &codedError{ErrCodeAlreadyStarted, sdk.ErrRunning}
	}
	c.started = true
	c.mu.Unlock()
	c.cbMu.Lock()
	c.l = listener
	c.cbMu.Unlock()
	go c.run()
	return nil
}

func (c *Client) run() {
	// Even when Stop came first, so that every started client reports
	// StateJoining first and StateStopped last.
	c.cbMu.Lock()
	if c.l != nil {
		c.l.OnState(StateJoining)
	}
	c.cbMu.Unlock()
	runErr := make(chan error, 1)
	go func() { runErr <- c.c.Run(c.ctx) }()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		c.watchJoin()
	}()
	for m := range c.c.Messages() {
		c.q.Push(m)
		c.goLive()
		c.callback(func(l Listener) { l.OnMessage(newMessage(m)) })
	}
	err := <-runErr
	c.cancel() // ends watchJoin when Run stopped by itself
	<-watched
	c.cbMu.Lock()
	defer c.cbMu.Unlock()
	c.over = true
	l := c.l
	// The app's listener usually refers to what owns this client: holding
	// it across the language boundary would keep both alive for good.
	c.l = nil
	if l == nil {
		return
	}
	if err != nil {
		l.OnError(ErrorCode(err), err.Error())
	}
	l.OnState(StateStopped)
}

// callback calls f with the listener unless there is none or the client is
// stopping.
func (c *Client) callback(f func(Listener)) {
	c.cbMu.Lock()
	defer c.cbMu.Unlock()
	c.notifyLocked(f)
}

// notifyLocked is callback with cbMu held.
func (c *Client) notifyLocked(f func(Listener)) {
	if c.l != nil && !c.over && !c.isStopped() {
		f(c.l)
	}
}

// goLive reports StateLive once. Both the join watcher and the first
// message call it, under the one lock, so StateLive precedes every
// OnMessage.
func (c *Client) goLive() {
	c.cbMu.Lock()
	defer c.cbMu.Unlock()
	if c.live {
		return
	}
	c.live = true
	c.notifyLocked(func(l Listener) { l.OnState(StateLive) })
}

// joinPoll is how often watchJoin looks for the first join: short next to a
// join's round trip, long enough to cost nothing.
const joinPoll = 20 * time.Millisecond

// watchJoin reports StateLive once the client has joined. danmaku/sdk has no
// join notification, so it polls until then.
func (c *Client) watchJoin() {
	t := time.NewTicker(joinPoll)
	defer t.Stop()
	for c.c.Entry().Token == "" {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
	c.goLive()
}

func (c *Client) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// Stop ends the client: at once, without waiting, from any thread (a
// callback included). Calling it again does nothing. A started client then
// reports OnState(StateStopped) last.
func (c *Client) Stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
}

// Send queues a comment; danmaku/sdk posts it, at most one per 1.2 s (a
// repeat of the same text within 10 s succeeds without being sent). It may
// be called before Start. Its errors have the codes ErrCodeEmptyText,
// ErrCodeTextTooLong and ErrCodeClosed. Whether the ingest kept the comment
// is not reported: it answers kept and dropped comments alike.
func (c *Client) Send(text string) error {
	if c.isStopped() {
		return &codedError{ErrCodeClosed, sdk.ErrClosed}
	}
	return wrap(c.c.Send(c.ctx, text))
}

// Announce posts a host or admin announcement at once; it comes back like
// any message, as KindSystem. It waits until the client has joined (or is
// stopped): call it off the UI thread. A viewer's ticket gets the server's
// code "forbidden". It returns no id: an error alone binds to a Swift
// "throws" and a Java exception without ambiguity.
func (c *Client) Announce(text string) error {
	if c.isStopped() {
		return &codedError{ErrCodeClosed, sdk.ErrClosed}
	}
	_, err := c.c.Announce(c.ctx, text)
	return wrap(err)
}

// Role is the role the entry endpoint gave this user ("viewer", "host" or
// "admin"); empty before the client has joined.
func (c *Client) Role() string { return c.c.Entry().Role }

// Next returns the next message to put on screen, or nil when there is none
// to show now (nothing waits, every place on screen is taken, or the queue
// is hidden). Call it on every frame until it returns nil. A message of kind
// KindTakedown is not to be shown: remove the element showing the message
// with its ID and TargetKind (a moderator took it down; its place on screen
// is free again).
func (c *Client) Next() *Message {
	m, ok := c.q.Next()
	if !ok {
		return nil
	}
	return newMessage(m)
}

// SetHidden pauses (true) or resumes (false) the render queue: while hidden
// Next returns nil, the screen counts as empty and arrivals are counted by
// NewCount. Call it when the app goes to the background or the viewer turns
// danmaku off, and again when it comes back.
func (c *Client) SetHidden(hidden bool) { c.q.SetHidden(hidden) }

// Hidden reports whether the render queue is hidden.
func (c *Client) Hidden() bool { return c.q.Hidden() }

// NewCount is the number of messages that arrived since the queue was
// hidden, for an "N new" badge; zero while shown.
func (c *Client) NewCount() int64 { return int64(c.q.NewCount()) }

// OnScreen is the number of messages handed out by Next whose display time
// has not passed.
func (c *Client) OnScreen() int64 { return int64(c.q.OnScreen()) }

// Waiting is the number of messages waiting for Next.
func (c *Client) Waiting() int64 { return int64(c.q.Len()) }

// Stats returns a snapshot of the counters.
func (c *Client) Stats() *Stats {
	s, r := c.c.Stats(), c.q.Stats()
	return &Stats{
		EntryFetches:     s.EntryFetches,
		SegmentsFetched:  s.SegmentsFetched,
		FirstPollHits:    s.FirstPollHits,
		NotFoundRetries:  s.NotFoundRetries,
		MismatchRetries:  s.MismatchRetries,
		LastSegmentLagMs: s.LastSegmentLagMs,
		ClockMarginMs:    s.ClockMarginMs,
		FetchErrors:      s.FetchErrors,
		DecodeErrors:     s.DecodeErrors,
		SeqGaps:          s.SeqGaps,
		JumpsToLive:      s.JumpsToLive,
		SkippedSeconds:   s.SkippedSeconds,
		EdgeConnects:     s.EdgeConnects,
		EdgeReconnects:   s.EdgeReconnects,
		EdgeDialErrors:   s.EdgeDialErrors,
		EdgeBanned:       s.EdgeBanned,
		EdgeFrames:       s.EdgeFrames,
		EdgeDecodeErrors: s.EdgeDecodeErrors,
		EdgeTokenAsks:    s.EdgeTokenAsks,
		Delivered:        s.Delivered,
		Duplicates:       s.Duplicates,
		DroppedBarrage:   s.DroppedBarrage,
		SendsPosted:      s.SendsPosted,
		SendsDeduped:     s.SendsDeduped,
		SendsDropped:     s.SendsDropped,
		SendsHeldBack:    s.SendsHeldBack,
		SendsFailed:      s.SendsFailed,

		TakedownsApplied:    s.TakedownsApplied,
		TakedownNotices:     s.TakedownNotices,
		TakedownsSuppressed: s.TakedownsSuppressed,
		TakedownLists:       s.TakedownLists,
		TakedownListErrors:  s.TakedownListErrors,

		RenderPushed:          r.Pushed,
		RenderShown:           r.Shown,
		RenderDroppedOverflow: r.DroppedOverflow,
		RenderDroppedHidden:   r.DroppedHidden,
		RenderBeyondBuffer:    r.BeyondBuffer,
		RenderCollapsedGifts:  r.CollapsedGifts,
		RenderRemovedWaiting:  r.RemovedWaiting,
		RenderRemovedShown:    r.RemovedShown,
		RenderWaiting:         int64(c.q.Len()),
	}
}

// ErrorCode returns the stable code of an error of this package: one of the
// ErrCode constants, or a server's own code (docs/api.md); "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code
	}
	return codeOf(err)
}

// codedError is an error with its code. It stays unexported: gobind hands
// apps an error (Java Exception, NSError) that refers to it, and ErrorCode
// reads the code. The text starts with the code so that logs and crash
// reports, which see only the text, show it too.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string { return e.code + ": " + e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func wrap(err error) error {
	var ce *codedError
	if err == nil || errors.As(err, &ce) {
		return err
	}
	return &codedError{codeOf(err), err}
}

func codeOf(err error) string {
	var ae *sdk.APIError
	var ne net.Error
	var ue *url.Error
	switch {
	// Before APIError: a refused join wraps the entry endpoint's answer.
	case errors.Is(err, sdk.ErrJoin):
		return ErrCodeJoinRefused
	case errors.Is(err, sdk.ErrRoomEnded):
		return ErrCodeRoomEnded
	case errors.Is(err, sdk.ErrConfig):
		return ErrCodeConfig
	case errors.Is(err, sdk.ErrClosed), errors.Is(err, context.Canceled):
		return ErrCodeClosed
	case errors.Is(err, sdk.ErrRunning):
		return ErrCodeAlreadyStarted
	case errors.Is(err, sdk.ErrEmptyText):
		return ErrCodeEmptyText
	case errors.Is(err, sdk.ErrTextTooLong):
		return ErrCodeTextTooLong
	case errors.Is(err, sdk.ErrNoIngest):
		return ErrCodeNoIngest
	case errors.As(err, &ae):
		return ae.Code
	case errors.As(err, &ne), errors.As(err, &ue), errors.Is(err, context.DeadlineExceeded):
		return ErrCodeNetwork
	}
	return ErrCodeUnknown
}

// playheadOf adapts the app's clock to the Go client's; nil stays nil.
func playheadOf(p PlayheadClock) sdk.PlayheadClock {
	if p == nil {
		return nil
	}
	return func() (int64, bool) {
		ms := p.PlayheadMs()
		return ms, ms > 0
	}
}

// Playhead returns the playhead synchronisation's counters.
func (c *Client) Playhead() *PlayheadStats {
	st := c.c.Playhead()
	return &PlayheadStats{
		Held: st.Held, Late: st.Late, Skipped: st.Skipped, Early: st.Early,
		Fallbacks: st.Fallbacks, Jumps: st.Jumps, Waiting: st.Waiting,
		SkewP50Ms: st.SkewP50Ms, SkewP99Ms: st.SkewP99Ms,
	}
}
