package slicer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Defaults.
const (
	defaultBudget        = 60
	defaultHighGiftValue = 1000
	defaultTick          = 50 * time.Millisecond
	defaultLeaseTTL      = 2 * time.Second
	defaultDiscover      = time.Second
	defaultGroup         = "slicer"
	defaultRetention     = time.Hour
	// endGrace is how far past its event's end a room is written: an
	// ingest learns of an early end within its directory's reload (1 s), so
	// what it accepted meanwhile still reaches a segment.
	endGrace  = 2 * time.Second
	readBatch = 1024
	// maxPending bounds the messages a leader holds read but unwritten —
	// pending (S3 down) and carried (a gift flood) alike; beyond it the
	// stream holds them.
	maxPending = 200_000
	// maxCatchUp bounds how far behind (in time) a leader that starts late
	// (slicer down for a while) writes the missed slots; beyond it the room
	// jumps to now and the sequence stays gap-free.
	maxCatchUp = 300 * time.Second
)

// Config configures a Slicer.
type Config struct {
	// Streams is read with a consumer group. Required.
	Streams stream.Store
	// Objects receives segments and manifests. Required.
	Objects objstore.Store
	// Lease elects one leader per room. Nil: in memory (one slicer).
	Lease Lease
	// Settings is where run-time budget changes are shared between slicers;
	// they are re-read every Discover. Nil: in memory.
	Settings SettingsStore
	// NodeID names this slicer as lease holder and consumer. Required
	// when several slicers share a Lease; zero: "slicer".
	NodeID string
	// Group is the consumer group name. Zero: "slicer".
	Group string
	// Budget is the number of messages a segment carries per second (what a
	// viewer can read). Zero: 60. Changeable at run time with SetBudget.
	Budget int
	// Shares split the budget between the queues. Zero: DefaultShares.
	Shares Shares
	// HighGiftValue is the value (value × count) from which a gift goes to
	// the high-value queue. Zero: 1000.
	HighGiftValue int64
	// PublishDelay is how long after a slot ends (by the stream store's
	// clock) its segment is due at the CDN, where clients ask for it; the
	// slicer writes it as soon as the slot ends and measures itself against
	// this. It must equal what the gslb hands clients. Zero:
	// wire.DefaultPublishDelayMs.
	PublishDelay time.Duration
	// Events says which rooms to lead — only rooms of live events — and
	// each room's settings (budget and shares, segment duration). When a
	// room's event ends, its leader writes the room to its end, marks the
	// manifest ended and lets everything of the room go. Nil: every room
	// opened in the stream store is led with the defaults (tests of the
	// slicer alone).
	Events *event.Directory
	// SegmentMs is the segment duration of rooms whose event sets none.
	// Zero: 1000.
	SegmentMs int64
	// Retention is how long an ended room's streams are kept (for
	// moderation) before they expire. Zero: 1 h.
	Retention time.Duration
	// Tick is how often rooms are read and checked for a due second. Zero: 50 ms.
	Tick time.Duration
	// LeaseTTL is the lease's lifetime; it is renewed every TTL/2 (by the
	// room's loop or, when that is starved, the process's renewer), and a
	// standby retries every TTL/3, so a takeover needs at most 1.33 TTL
	// after the lease lapses. Zero: 2 s.
	LeaseTTL time.Duration
	// Discover is how often the room list is re-read. Zero: 1 s.
	Discover time.Duration
	// Backlog is where each room's leader publishes the room's gift
	// backlog (seconds of budget), which the ingest nodes read to refuse
	// new gifts over their bound. Nil: in memory, seen by this process
	// only.
	Backlog Backlog
	// Audit receives a record of every comment the budget sampled away
	// (decision sampled, with its stream id), beside the ingest's record
	// of it as stored. Nil: none. The caller runs and shuts it down.
	Audit Auditor
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Clock tells local time. Nil: real clock. When it makes timers
	// (clock.TimersOf: a clock.Fake) the discovery and renewal tickers, the
	// leader's tick and retry waits and the standby's wait run on it too.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

type budgetConf struct {
	budget int
	shares Shares
}

// Auditor takes audit records (an *audit.Recorder).
type Auditor interface {
	Record(audit.Record)
}

// Slicer writes one segment per room per second.
type Slicer struct {
	cfg    Config
	timers clock.Timers // cfg.Clock's when it makes them (clock.TimersOf)
	// holder is this process's lease identity: the node id plus a random
	// nonce, so two processes given the same node id never both lead.
	holder string
	budget atomic.Pointer[budgetConf]
	m      metrics

	mu    sync.Mutex
	rooms map[string]*roomHandle
	wg    sync.WaitGroup

	leasesMu sync.Mutex
	leases   map[string]*heldLease // rooms this process leads

	// maxPending is the read stop (the maxPending constant; tests lower it).
	maxPending int
	// backlogs is the gift backlog last published per room led, for the
	// gauge.
	backlogMu sync.Mutex
	backlogs  map[string]float64
	// siteTrimmed is when (local unix ns) this process last trimmed the
	// site stream.
	siteTrimmed atomic.Int64
	// discoveries counts the discovery passes Run has finished, so that a
	// test can wait for one instead of sleeping.
	discoveries atomic.Int64
	// roomM counts the segments written per event and room.
	roomM *roomMetrics
}

// Discoveries returns how many discovery passes Run has finished.
func (s *Slicer) Discoveries() int64 { return s.discoveries.Load() }

type metrics struct {
	written     *prometheus.CounterVec
	bytes       prometheus.Histogram
	latency     prometheus.Histogram
	perQueue    *prometheus.CounterVec
	drops       *prometheus.CounterVec
	lag         prometheus.Gauge
	ready       prometheus.Histogram
	late        prometheus.Counter
	carried     prometheus.Gauge
	leaderFor   prometheus.Gauge
	writeErrors prometheus.Counter
	behind      prometheus.Gauge
	reclaimed   prometheus.Counter
	site        *prometheus.CounterVec
	siteCarried prometheus.Gauge
}

// New checks cfg, applies defaults and returns a Slicer. It starts nothing.
func New(cfg Config) (*Slicer, error) {
	if cfg.Streams == nil || cfg.Objects == nil {
		return nil, errors.New("slicer: Streams and Objects are required")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Lease == nil {
		cfg.Lease = NewMemoryLease(cfg.Clock)
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "slicer"
	}
	if cfg.Settings == nil {
		cfg.Settings = &MemorySettings{}
	}
	if cfg.Group == "" {
		cfg.Group = defaultGroup
	}
	if cfg.Budget == 0 {
		cfg.Budget = defaultBudget
	}
	if cfg.Shares == (Shares{}) {
		cfg.Shares = DefaultShares
	}
	if cfg.HighGiftValue == 0 {
		cfg.HighGiftValue = defaultHighGiftValue
	}
	if cfg.PublishDelay == 0 {
		cfg.PublishDelay = wire.DefaultPublishDelayMs * time.Millisecond
	}
	if cfg.SegmentMs == 0 {
		cfg.SegmentMs = wire.SegmentDuration
	}
	if !wire.ValidSegmentMs(cfg.SegmentMs) {
		return nil, fmt.Errorf("slicer: SegmentMs %d is not 1000, 500 or 250", cfg.SegmentMs)
	}
	if cfg.Retention == 0 {
		cfg.Retention = defaultRetention
	}
	if cfg.Tick == 0 {
		cfg.Tick = defaultTick
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = defaultLeaseTTL
	}
	if cfg.Discover == 0 {
		cfg.Discover = defaultDiscover
	}
	if cfg.Backlog == nil {
		cfg.Backlog = NewMemoryBacklog(cfg.Clock)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	nonce := make([]byte, 6)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	s := &Slicer{cfg: cfg, timers: clock.TimersOf(cfg.Clock), holder: cfg.NodeID + "#" + hex.EncodeToString(nonce), rooms: map[string]*roomHandle{}, leases: map[string]*heldLease{},
		maxPending: maxPending, backlogs: map[string]float64{}}
	if err := s.SetBudget(cfg.Budget, cfg.Shares); err != nil {
		return nil, err
	}
	if err := s.m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	// Per-room series, counted as segments are written (noteWritten,
	// metrics_room.go).
	rm := newRoomMetrics(cfg.Events)
	for _, c := range rm.collectors() {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("slicer: metrics: %w", err)
		}
	}
	s.roomM = rm
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "danmaku_slicer_rooms", Help: "Rooms this slicer runs a loop for, leading or standing by: the rooms of live events."},
		func() float64 { return float64(s.RoomsRunning()) })
	if err := cfg.Registerer.Register(running); err != nil {
		return nil, fmt.Errorf("slicer: metrics: %w", err)
	}
	backlog := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "danmaku_slicer_gift_backlog_seconds", Help: "The largest gift backlog (carried + read and unwritten gifts, in seconds of the budget gifts can use) published for the rooms this slicer leads."},
		s.maxBacklog)
	if err := cfg.Registerer.Register(backlog); err != nil {
		return nil, fmt.Errorf("slicer: metrics: %w", err)
	}
	return s, nil
}

func (m *metrics) register(r prometheus.Registerer) error {
	m.written = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_segments_total", Help: "Segments by outcome (written, existed)."}, []string{"outcome"})
	m.bytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "danmaku_slicer_segment_bytes", Help: "Encoded segment size.", Buckets: prometheus.ExponentialBuckets(16, 4, 8)})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "danmaku_slicer_segment_write_seconds", Help: "Time to write one segment (PUT).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.perQueue = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_segment_messages_total", Help: "Messages written into segments, by queue (messages per packet = this / segments)."}, []string{"queue"})
	m.drops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_dropped_total", Help: "Barrage not written, by reason."}, []string{"reason"})
	m.lag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_lag_seconds", Help: "How far behind its due time (end + publish delay) the last segment was written; negative: ahead."})
	m.ready = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "danmaku_slicer_segment_ready_seconds", Help: "From a slot's end to its segment written, by the store clock: what the publish delay must cover.", Buckets: []float64{0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5}})
	m.late = prometheus.NewCounter(prometheus.CounterOpts{Name: "danmaku_slicer_segments_late_total", Help: "Segments written after their due time: clients asked before they existed."})
	m.carried = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_carried_messages", Help: "Gifts and system messages carried over to the next second, last segment."})
	m.leaderFor = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_rooms_led", Help: "Rooms this slicer leads."})
	m.writeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "danmaku_slicer_write_errors_total", Help: "Failed segment writes (each retried, in order)."})
	m.behind = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_behind_seconds", Help: "How far the next unwritten second is past its due time (grows while object storage is down)."})
	m.reclaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "danmaku_slicer_reclaimed_total", Help: "Messages reclaimed from a predecessor leader on takeover."})
	// Not by room: a slicer leads thousands of rooms.
	m.site = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_site_messages_total", Help: "Site-wide broadcasts by outcome, summed over the rooms led: written (into a room's segment, once per room), skipped (outside a room's window: before its opening or after its end)."}, []string{"outcome"})
	m.siteCarried = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_site_carried_messages", Help: "Site-wide broadcasts carried over to the next slot (over their share of the budget), last segment."})
	for _, c := range []prometheus.Collector{m.written, m.bytes, m.latency, m.perQueue, m.drops, m.lag, m.ready, m.late, m.carried, m.leaderFor, m.writeErrors, m.behind, m.reclaimed, m.site, m.siteCarried} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("slicer: metrics: %w", err)
		}
	}
	return nil
}

// maxBudget bounds the budget: far above what a viewer can read, and low
// enough that no share arithmetic overflows.
const maxBudget = 100_000

// SetBudget changes the per-second budget and shares at run time.
func (s *Slicer) SetBudget(budget int, shares Shares) error {
	if err := checkBudget(budget, shares); err != nil {
		return err
	}
	s.budget.Store(&budgetConf{budget: budget, shares: shares})
	return nil
}

// checkBudget names the first field out of its range: the operator API
// answers with its message.
func checkBudget(budget int, shares Shares) error {
	if budget < 1 || budget > maxBudget {
		return fmt.Errorf("slicer: budget must be 1-%d messages per second (got %d)", maxBudget, budget)
	}
	sum := 0.0
	for i, v := range shares {
		if !(v >= 0 && v <= 1) { // also refuses NaN
			return fmt.Errorf("slicer: shares[%d] must be from 0 to 1 (got %v)", i, v)
		}
		sum += v
	}
	if !(sum >= 0.999 && sum <= 1.001) {
		return fmt.Errorf("slicer: shares must sum to 1 (got %.3f)", sum)
	}
	return nil
}

// Run discovers rooms, leads those whose lease it wins, and writes their
// segments until ctx is done. It returns after every room loop has stopped.
func (s *Slicer) Run(ctx context.Context) error {
	t, tick := s.timers.NewTicker(s.cfg.Discover)
	defer t.Stop()
	defer s.wg.Wait()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.renewLoop(ctx)
	}()
	for {
		s.syncSettings(ctx)
		s.discover(ctx)
		s.discoveries.Add(1)
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}

// heldLease is a lease this process holds: when it was last renewed (unix
// ns of the request) and whether another holder took it.
type heldLease struct {
	renewed atomic.Int64
	lost    atomic.Bool
}

func (l *heldLease) at() time.Time { return time.Unix(0, l.renewed.Load()) }

func (s *Slicer) hold(room string, l *heldLease) {
	s.leasesMu.Lock()
	s.leases[room] = l
	s.leasesMu.Unlock()
}

func (s *Slicer) unhold(room string) {
	s.leasesMu.Lock()
	delete(s.leases, room)
	s.leasesMu.Unlock()
}

// renewLoop renews, every quarter TTL, each lease whose room loop has not
// renewed it for half a TTL. Renewal lives here, apart from the rooms'
// work, so that a process too busy to run its rooms' loops on time still
// keeps its leases: its segments fall behind, but no standby flip-flops
// the rooms back and forth.
func (s *Slicer) renewLoop(ctx context.Context) {
	t, tick := s.timers.NewTicker(s.cfg.LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		s.leasesMu.Lock()
		due := make(map[string]*heldLease, len(s.leases))
		now := s.cfg.Clock.Now()
		for room, l := range s.leases {
			if !l.lost.Load() && now.Sub(l.at()) >= s.cfg.LeaseTTL/2 {
				due[room] = l
			}
		}
		s.leasesMu.Unlock()
		for room, l := range due {
			rctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL/4)
			if err := s.renewLease(rctx, room, l, s.cfg.Clock.Now()); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("slicer: lease renewal failed", "room", room, "err", err)
			}
			cancel()
		}
	}
}

// roomHandle is a room this slicer runs (leads or stands by for).
type roomHandle struct {
	// endMs is the unix ms its event ends at, once the directory says it
	// has; 0 while live.
	endMs atomic.Int64
}

// discover starts a loop for every room to lead that has none, and tells
// the loops of rooms whose event has ended. With Events only rooms of live
// events run; a room name nobody provisioned costs nothing.
func (s *Slicer) discover(ctx context.Context) {
	type start struct {
		room   string
		opened time.Time
	}
	var starts []start
	if d := s.cfg.Events; d != nil {
		for _, v := range d.LiveRooms() {
			starts = append(starts, start{v.Room.ID, v.Event.Start})
		}
	} else {
		rooms, err := s.cfg.Streams.Rooms(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("slicer: list rooms failed", "err", err)
			}
			return
		}
		for _, r := range rooms {
			starts = append(starts, start{r.ID, r.Opened})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.cfg.Events; d != nil && d.Ready() {
		for room, h := range s.rooms {
			if h.endMs.Load() != 0 {
				continue
			}
			switch v, ok := d.Lookup(room); {
			case !ok: // removed from its event: it ends now
				h.endMs.Store(s.cfg.Clock.Now().UnixMilli())
			case v.State == event.Ended:
				h.endMs.Store(v.Event.EndTime().UnixMilli())
			}
		}
	}
	for _, st := range starts {
		room, opened := st.room, st.opened
		if _, running := s.rooms[room]; running || !wire.ValidRoom(room) {
			continue
		}
		h := &roomHandle{}
		s.rooms[room] = h
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runRoom(ctx, room, opened, h)
			s.mu.Lock()
			delete(s.rooms, room)
			s.mu.Unlock()
		}()
	}
}

// roomConf returns room's segment duration and budget: its event's
// settings where it sets them, else this slicer's.
func (s *Slicer) roomConf(room string) (dur int64, b budgetConf) {
	dur, b = s.cfg.SegmentMs, *s.budget.Load()
	if s.cfg.Events == nil {
		return dur, b
	}
	v, ok := s.cfg.Events.Lookup(room)
	if !ok {
		return dur, b
	}
	if v.Room.SegmentMs != 0 {
		dur = v.Room.SegmentMs
	}
	if v.Room.Budget != 0 {
		b.budget = v.Room.Budget
	}
	if len(v.Room.Shares) == len(b.shares) {
		copy(b.shares[:], v.Room.Shares)
	}
	return dur, b
}

// RoomsRunning is the number of rooms this slicer runs (leads or stands by
// for).
func (s *Slicer) RoomsRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rooms)
}
