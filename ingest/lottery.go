package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/reload"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Lottery is an interactive command a host starts in a room: viewers enter
// by typing its keyword as a comment until it closes. Every viewer who
// enters is recorded once, however often they type it; only what fits the
// room's fast-lane cap is displayed.
type Lottery struct {
	// ID names the lottery within its room: 1-64 of A-Z a-z 0-9 _ -.
	ID string `json:"id"`
	// Room is the room it runs in.
	Room string `json:"room"`
	// Keyword is the text that enters, as stored comments are (normalize);
	// a comment enters when it equals it up to case.
	Keyword string `json:"keyword"`
	// Until is when it closes by itself.
	Until time.Time `json:"until"`
	// StartedAt is when it was started; StoppedAt when it was stopped
	// early (zero: not stopped).
	StartedAt time.Time `json:"started_at"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	// StartedBy is the host who started it ("": an operator key).
	StartedBy string `json:"started_by,omitempty"`
}

// Open reports whether l takes entries at now.
func (l *Lottery) Open(now time.Time) bool { return l.StoppedAt.IsZero() && now.Before(l.Until) }

// sameStart reports whether b, started under l's id, is l started again
// (after a lost answer): the same keyword while l runs. Its end may differ
// (a start by duration sent again computes another one); l's stands.
func (l *Lottery) sameStart(b *Lottery) bool {
	return l.ID == b.ID && l.Room == b.Room && l.Keyword == b.Keyword && l.StoppedAt.IsZero()
}

// Bounds of a lottery.
const (
	maxKeywordRunes = 32
	// maxLotteryLength bounds how long a lottery runs: an event's
	// interactive moment, not a standing feature.
	maxLotteryLength = 24 * time.Hour
	// defaultLotteryRetention is how long a lottery and its entrants are
	// kept after it closes, for the host to draw from and audit.
	defaultLotteryRetention = 7 * 24 * time.Hour
	defaultLotteryReload    = time.Second
)

var lotteryIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Errors of the lottery store.
var (
	// ErrBadLottery is returned (wrapped) for a lottery or call that is not
	// valid: nothing is stored.
	ErrBadLottery = errors.New("ingest: bad lottery")
	// ErrNoLottery is returned (wrapped) for a lottery that does not exist
	// (or whose retention has passed).
	ErrNoLottery = errors.New("ingest: no such lottery")
	// ErrLotteryExists is returned (wrapped) by Start for an id the room
	// already used for another lottery (a different keyword or end, or one
	// that was stopped).
	ErrLotteryExists = errors.New("ingest: lottery id taken")
	// ErrLotteryClosed is returned (wrapped) by Enter after the lottery
	// was stopped or passed its end.
	ErrLotteryClosed = errors.New("ingest: lottery closed")
)

// Validate checks l's fields against now (Until must be ahead, within
// 24 h of StartedAt).
func (l *Lottery) Validate(now time.Time) error {
	switch {
	case !lotteryIDRE.MatchString(l.ID):
		return fmt.Errorf("%w: id %q: 1-64 of A-Z a-z 0-9 _ -", ErrBadLottery, l.ID)
	case !wire.ValidRoom(l.Room):
		return fmt.Errorf("%w: room %q: 1-64 of A-Z a-z 0-9 _ -", ErrBadLottery, l.Room)
	case l.Keyword == "" || l.Keyword != normalize(l.Keyword) || utf8.RuneCountInString(l.Keyword) > maxKeywordRunes:
		return fmt.Errorf("%w: keyword: 1-%d characters, normalised", ErrBadLottery, maxKeywordRunes)
	case !l.Until.After(now):
		return fmt.Errorf("%w: until %s is not in the future", ErrBadLottery, l.Until.Format(time.RFC3339))
	case l.Until.Sub(l.StartedAt) > maxLotteryLength:
		return fmt.Errorf("%w: a lottery runs at most %v", ErrBadLottery, maxLotteryLength)
	case len(l.StartedBy) > maxEntrantBytes:
		return fmt.Errorf("%w: started_by too long", ErrBadLottery)
	}
	return nil
}

// maxEntrantBytes bounds a user id in a lottery (ticket subjects are far
// shorter).
const maxEntrantBytes = 256

func checkLotteryRef(room, id string) error {
	if !wire.ValidRoom(room) || !lotteryIDRE.MatchString(id) {
		return fmt.Errorf("%w: room %q, id %q", ErrBadLottery, room, id)
	}
	return nil
}

func checkEntrant(user string) error {
	if user == "" || len(user) > maxEntrantBytes {
		return fmt.Errorf("%w: user must be 1-%d bytes", ErrBadLottery, maxEntrantBytes)
	}
	return nil
}

// maxEntrantsPage bounds one Entrants call.
const maxEntrantsPage = 10_000

// LotteryStore keeps the lotteries and their entrants, shared by every
// ingest node. Entrants are a set per lottery: a user is recorded once
// however many nodes see their entries. Implementations are safe for
// concurrent use.
type LotteryStore interface {
	// Start records l (validated; a zero StartedAt is now) and returns the
	// lottery as stored. Starting a running lottery again with the same
	// keyword (a retry after a lost answer) changes nothing and returns it
	// as first started; another keyword under a used id, or the id of a
	// stopped lottery, is ErrLotteryExists.
	Start(ctx context.Context, l Lottery) (Lottery, error)
	// Stop closes room's lottery id at at and returns it; stopping a
	// stopped lottery returns it unchanged.
	Stop(ctx context.Context, room, id string, at time.Time) (Lottery, error)
	// Get returns room's lottery id.
	Get(ctx context.Context, room, id string) (Lottery, error)
	// Enter records user as an entrant, by the store's clock: first is
	// true for the user's first entry, false for a repeat. ErrLotteryClosed
	// after Stop or Until, ErrNoLottery for an unknown lottery.
	Enter(ctx context.Context, room, id, user string) (first bool, err error)
	// Count returns how many users entered.
	Count(ctx context.Context, room, id string) (int64, error)
	// Entrants returns a page of at most about count entrants from cursor
	// (0: the start) and the cursor of the next page (0: done). Every user
	// who entered before the listing started is listed at least once
	// (Redis SSCAN's guarantee; a page may repeat a user).
	Entrants(ctx context.Context, room, id string, cursor uint64, count int) (users []string, next uint64, err error)
	// Running returns the lotteries not stopped (some may have passed
	// their end) and the version they are at.
	Running(ctx context.Context) ([]Lottery, int64, error)
	// Version returns a value that moves with every Start and Stop.
	Version(ctx context.Context) (int64, error)
}

// LotteriesConfig configures Lotteries.
type LotteriesConfig struct {
	// Store keeps the lotteries. Required.
	Store LotteryStore
	// FastLane displays first entries. Required: the same FastLane the
	// announcements use, so that both share a room's cap.
	FastLane FastLane
	// DisplayCap is how many fast-lane messages a room displays per
	// second. Zero: 30.
	DisplayCap int
	// CapOf, when set, returns a room's own cap (its event's limits,
	// changed at run time), 0 meaning DisplayCap.
	CapOf func(room string) int
	// Reload is how often the store's version is checked. Zero: 1 s.
	Reload time.Duration
	// Clock judges which lotteries are open. Nil: real clock.
	Clock clock.Clock
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Lotteries is a node's view of the running lotteries and the matcher the
// barrage path calls: a snapshot of the store's running lotteries by room,
// reloaded when the store's version moves (checked every Reload, like
// BanList), so a comment in a room without a lottery costs one map read
// and no store call. A failed reload keeps the last snapshot. A lottery
// started or stopped on another node is seen here within Reload; Enter
// checks the store's own record, so an entry after a stop elsewhere is
// refused there and passes on as an ordinary comment. Safe for concurrent
// use.
type Lotteries struct {
	store      LotteryStore
	fast       FastLane
	displayCap int
	capOf      func(room string) int
	every      time.Duration
	clk        clock.Clock
	log        *slog.Logger

	snap atomic.Pointer[lotterySnapshot]

	// Counters of entries (first, repeat) and of first entries' display
	// (displayed, over the cap, failed), resolved once: Match is the
	// barrage path.
	firsts, repeats            prometheus.Counter
	displayed, overCap, failed prometheus.Counter
}

// maxSeenPerLottery bounds a node's memory of one lottery's entrants
// (about 50 MB at the bound); past it, repeats ask the store, which
// answers them right anyway.
const maxSeenPerLottery = 1 << 20

type seenUsers struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *seenUsers) has(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[user]
	return ok
}

func (s *seenUsers) add(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) < maxSeenPerLottery {
		s.m[user] = struct{}{}
	}
}

type lotterySnapshot struct {
	version int64
	rooms   map[string][]runningLottery
}

// runningLottery is a lottery in a node's snapshot, with seen: the users
// this node has recorded for it, so that a viewer typing the keyword
// again costs no store call (users are sticky to an ingest node, so most
// repeats are local). seen carries over from one snapshot to the next.
type runningLottery struct {
	Lottery
	seen *seenUsers
}

// NewLotteries returns Lotteries; call Refresh or Run to load it. It
// starts nothing.
func NewLotteries(cfg LotteriesConfig) (*Lotteries, error) {
	if cfg.Store == nil || cfg.FastLane == nil {
		return nil, errors.New("ingest: lotteries: Store and FastLane are required")
	}
	if cfg.DisplayCap == 0 {
		cfg.DisplayCap = defaultFastLaneCap
	}
	if cfg.DisplayCap < 1 || cfg.DisplayCap > maxFastLaneCap {
		return nil, fmt.Errorf("ingest: lotteries: DisplayCap %d: 1-%d", cfg.DisplayCap, maxFastLaneCap)
	}
	if cfg.Reload < 0 {
		return nil, errors.New("ingest: lotteries: negative Reload")
	}
	if cfg.Reload == 0 {
		cfg.Reload = defaultLotteryReload
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Lotteries{store: cfg.Store, fast: cfg.FastLane, displayCap: cfg.DisplayCap, capOf: cfg.CapOf, every: cfg.Reload, clk: clock.Or(cfg.Clock), log: cfg.Logger}
	entries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_lottery_entries_total",
		Help: "Lottery entries recorded, by kind: first (a new entrant) or repeat (a user entering again, counted once).",
	}, []string{"kind"})
	display := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_lottery_display_total",
		Help: "First lottery entries offered to the fast lane, by result: displayed, over_cap (recorded, not shown) or failed (recorded, the append failed).",
	}, []string{"result"})
	l.firsts, l.repeats = entries.WithLabelValues("first"), entries.WithLabelValues("repeat")
	l.displayed, l.overCap, l.failed = display.WithLabelValues("displayed"), display.WithLabelValues("over_cap"), display.WithLabelValues("failed")
	for _, c := range []prometheus.Collector{entries, display} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("ingest: lottery metrics: %w", err)
		}
	}
	empty := &lotterySnapshot{version: -1, rooms: map[string][]runningLottery{}}
	l.snap.Store(empty)
	return l, nil
}

// Refresh reloads the snapshot if the store's version moved.
func (l *Lotteries) Refresh(ctx context.Context) error {
	cur := l.snap.Load()
	if cur.version >= 0 {
		v, err := l.store.Version(ctx)
		if err != nil {
			return err
		}
		if v == cur.version {
			return nil
		}
	}
	running, v, err := l.store.Running(ctx)
	if err != nil {
		return err
	}
	s := &lotterySnapshot{version: v, rooms: map[string][]runningLottery{}}
	for _, x := range running {
		// A lottery's memory of its entrants outlives reloads; that of a
		// lottery no longer running goes with the old snapshot.
		r := runningLottery{Lottery: x}
		if i := slices.IndexFunc(cur.rooms[x.Room], func(o runningLottery) bool { return o.ID == x.ID }); i >= 0 {
			r.seen = cur.rooms[x.Room][i].seen
		} else {
			r.seen = &seenUsers{m: map[string]struct{}{}}
		}
		s.rooms[x.Room] = append(s.rooms[x.Room], r)
	}
	l.snap.Store(s)
	return nil
}

// Run reloads every Reload until ctx is done.
func (l *Lotteries) Run(ctx context.Context) error {
	return reload.Every(ctx, l.every, l.log, "ingest: lottery", l.Refresh)
}

// Active returns room's open lotteries in this node's snapshot.
func (l *Lotteries) Active(room string) []Lottery {
	ls := l.snap.Load().rooms[room]
	if len(ls) == 0 {
		return nil
	}
	now := l.clk.Now()
	var out []Lottery
	for i := range ls {
		if ls[i].Open(now) {
			out = append(out, ls[i].Lottery)
		}
	}
	return out
}

// LotteryEntry is what Match did with a comment.
type LotteryEntry struct {
	// Lottery is the id of the lottery the comment entered; "": the
	// comment is not a lottery entry and goes on as barrage.
	Lottery string
	// First is set for the user's first entry, Shown when it was displayed.
	First, Shown bool
}

// Match is the barrage path's fast-lane step, called before duplicate
// suppression: if m.Text (normalised, as stored) equals the keyword of an
// open lottery of room up to case, m.User is recorded as its entrant and,
// on a first entry, m is offered to the fast lane's Barrage lane (over the
// room's cap it is recorded, not shown). The caller then answers
// {"ok": true, "lottery": id} and does not send m through the buckets.
//
// A room without an open lottery costs a map read; a user this node has
// recorded for the lottery already is a repeat without a store call. An
// error means the entry may not be recorded: answer 503, and the client's
// retry is safe (an entrant is recorded once).
func (l *Lotteries) Match(ctx context.Context, room string, m wire.Message) (LotteryEntry, error) {
	ls := l.snap.Load().rooms[room]
	if len(ls) == 0 {
		return LotteryEntry{}, nil
	}
	now := l.clk.Now()
	for i := range ls {
		x := &ls[i]
		if !x.Open(now) || !strings.EqualFold(m.Text, x.Keyword) {
			continue
		}
		if x.seen.has(m.User) {
			l.repeats.Inc()
			return LotteryEntry{Lottery: x.ID}, nil
		}
		first, err := l.store.Enter(ctx, room, x.ID, m.User)
		if errors.Is(err, ErrLotteryClosed) || errors.Is(err, ErrNoLottery) {
			// Stopped on another node since the last reload: an ordinary
			// comment.
			continue
		}
		if err != nil {
			return LotteryEntry{}, err
		}
		x.seen.add(m.User)
		e := LotteryEntry{Lottery: x.ID, First: first}
		if !first {
			l.repeats.Inc()
			return e, nil
		}
		l.firsts.Inc()
		limit := l.displayCap
		if l.capOf != nil {
			if c := l.capOf(room); c > 0 {
				limit = c
			}
		}
		shown, err := l.fast.Show(ctx, room, stream.Barrage, m, limit)
		switch {
		case err != nil:
			// The entry is recorded, which is what the lottery needs;
			// its display is as droppable as any comment.
			l.failed.Inc()
			l.log.Warn("ingest: lottery entry not displayed", "room", room, "lottery", x.ID, "err", err)
		case shown.OK():
			l.displayed.Inc()
			e.Shown = true
		default:
			l.overCap.Inc()
		}
		return e, nil
	}
	return LotteryEntry{}, nil
}
