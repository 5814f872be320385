package slicer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/internal/wire"
)

// Defaults.
const (
	defaultBudget        = 60
	defaultHighGiftValue = 1000
	defaultPublishDelay  = 300 * time.Millisecond
	defaultTick          = 50 * time.Millisecond
	defaultLeaseTTL      = 2 * time.Second
	defaultDiscover      = time.Second
	defaultGroup         = "slicer"
	readBatch            = 1024
	// maxPending bounds the messages a leader holds read but unwritten
	// (S3 down); beyond it the stream holds them.
	maxPending = 200_000
	// maxCatchUp bounds how many missed seconds a leader writes when it
	// starts behind (slicer down for a while); beyond it the room jumps to
	// now and the sequence stays gap-free.
	maxCatchUp = 300
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
	// PublishDelay is how long after a second ends (by the stream store's
	// clock) its segment is written, so that appends in flight land. Zero:
	// 300 ms.
	PublishDelay time.Duration
	// Tick is how often rooms are read and checked for a due second. Zero: 50 ms.
	Tick time.Duration
	// LeaseTTL is the lease's lifetime; it is renewed every TTL/4, and a
	// standby retries every TTL/4, so a takeover needs at most 1.25 TTL.
	// Zero: 2 s.
	LeaseTTL time.Duration
	// Discover is how often the room list is re-read. Zero: 1 s.
	Discover time.Duration
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Clock tells local time. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

type budgetConf struct {
	budget int
	shares Shares
}

// Slicer writes one segment per room per second.
type Slicer struct {
	cfg    Config
	budget atomic.Pointer[budgetConf]
	m      metrics

	mu    sync.Mutex
	rooms map[string]context.CancelFunc
	wg    sync.WaitGroup
}

type metrics struct {
	written     *prometheus.CounterVec
	bytes       prometheus.Histogram
	latency     prometheus.Histogram
	perQueue    *prometheus.CounterVec
	drops       *prometheus.CounterVec
	lag         prometheus.Gauge
	carried     prometheus.Gauge
	leaderFor   prometheus.Gauge
	writeErrors prometheus.Counter
	behind      prometheus.Gauge
	reclaimed   prometheus.Counter
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
		cfg.PublishDelay = defaultPublishDelay
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
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Slicer{cfg: cfg, rooms: map[string]context.CancelFunc{}}
	if err := s.SetBudget(cfg.Budget, cfg.Shares); err != nil {
		return nil, err
	}
	if err := s.m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	return s, nil
}

func (m *metrics) register(r prometheus.Registerer) error {
	m.written = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_segments_total", Help: "Segments by outcome (written, existed)."}, []string{"outcome"})
	m.bytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "danmaku_slicer_segment_bytes", Help: "Encoded segment size.", Buckets: prometheus.ExponentialBuckets(16, 4, 8)})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "danmaku_slicer_segment_write_seconds", Help: "Time to write one segment (PUT).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.perQueue = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_segment_messages_total", Help: "Messages written into segments, by queue (messages per packet = this / segments)."}, []string{"queue"})
	m.drops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "danmaku_slicer_dropped_total", Help: "Barrage not written, by reason."}, []string{"reason"})
	m.lag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_lag_seconds", Help: "How far behind its due time the last segment was written."})
	m.carried = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_carried_messages", Help: "Gifts and system messages carried over to the next second, last segment."})
	m.leaderFor = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_rooms_led", Help: "Rooms this slicer leads."})
	m.writeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "danmaku_slicer_write_errors_total", Help: "Failed segment writes (each retried, in order)."})
	m.behind = prometheus.NewGauge(prometheus.GaugeOpts{Name: "danmaku_slicer_behind_seconds", Help: "How far the next unwritten second is past its due time (grows while object storage is down)."})
	m.reclaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "danmaku_slicer_reclaimed_total", Help: "Messages reclaimed from a predecessor leader on takeover."})
	for _, c := range []prometheus.Collector{m.written, m.bytes, m.latency, m.perQueue, m.drops, m.lag, m.carried, m.leaderFor, m.writeErrors, m.behind, m.reclaimed} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("slicer: metrics: %w", err)
		}
	}
	return nil
}

// SetBudget changes the per-second budget and shares at run time.
func (s *Slicer) SetBudget(budget int, shares Shares) error {
	sum := 0.0
	for _, v := range shares {
		if v < 0 {
			return errors.New("slicer: negative share")
		}
		sum += v
	}
	if budget < 1 || sum < 0.999 || sum > 1.001 {
		return fmt.Errorf("slicer: budget must be >= 1 and shares sum to 1 (got %d, %.3f)", budget, sum)
	}
	s.budget.Store(&budgetConf{budget: budget, shares: shares})
	return nil
}

// Run discovers rooms, leads those whose lease it wins, and writes their
// segments until ctx is done. It returns after every room loop has stopped.
func (s *Slicer) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Discover)
	defer t.Stop()
	defer s.wg.Wait()
	for {
		s.syncSettings(ctx)
		s.discover(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Slicer) discover(ctx context.Context) {
	rooms, err := s.cfg.Streams.Rooms(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("slicer: list rooms failed", "err", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rooms {
		room, opened := r.ID, r.Opened
		if _, running := s.rooms[room]; running || !wire.ValidRoom(room) {
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		s.rooms[room] = cancel
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runRoom(rctx, room, opened)
			s.mu.Lock()
			delete(s.rooms, room)
			s.mu.Unlock()
		}()
	}
}

// runRoom contends for room's lease and leads it while held.
func (s *Slicer) runRoom(ctx context.Context, room string, opened time.Time) {
	for ctx.Err() == nil {
		ok, err := s.cfg.Lease.Acquire(ctx, room, s.cfg.NodeID, s.cfg.LeaseTTL)
		if err == nil && ok {
			s.m.leaderFor.Inc()
			err = s.lead(ctx, room, opened)
			s.m.leaderFor.Dec()
			_ = s.cfg.Lease.Release(context.WithoutCancel(ctx), room, s.cfg.NodeID)
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("slicer: lost room", "room", room, "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.LeaseTTL / 4):
		}
	}
}

// errLostLease ends a leader's term.
var errLostLease = errors.New("slicer: lease lost")

// roomState is the leader's state of one room.
type roomState struct {
	room     string
	next     int64 // next second to write
	seq      uint64
	etag     string                    // manifest ETag last written or read
	pending  map[int64][]wire.Message  // read, not yet written, by second
	npending int                       // messages in pending
	carry    [numQueues][]wire.Message // never-droppable messages carried over
	rng      *rand.Rand
}

// add files m under second sec, or under the next unwritten second when sec
// was written already (a message read late goes out late, never lost).
func (st *roomState) add(sec int64, m wire.Message) {
	sec = max(sec, st.next)
	st.pending[sec] = append(st.pending[sec], m)
	st.npending++
}

// lead writes room's seconds while the lease is held.
func (s *Slicer) lead(ctx context.Context, room string, opened time.Time) error {
	st, err := s.resume(ctx, room, opened)
	if err != nil {
		return err
	}
	if err := s.reclaim(ctx, st); err != nil {
		return err
	}
	s.cfg.Logger.Info("slicer: leading room", "room", room, "from_second", st.next, "seq", st.seq)
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	renewed := s.cfg.Clock.Now()
	var (
		failures int
		retryAt  time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := s.cfg.Clock.Now()
		if now.Sub(renewed) >= s.cfg.LeaseTTL/4 {
			ok, err := s.cfg.Lease.Acquire(ctx, room, s.cfg.NodeID, s.cfg.LeaseTTL)
			if err != nil || !ok {
				return errors.Join(errLostLease, err)
			}
			renewed = now
		}
		// While object storage is down, due seconds wait as their pending
		// messages. Past maxPending the slicer stops reading, so the rest
		// waits in the stream (unread, never lost) instead of in memory.
		if st.npending < maxPending {
			if err := s.read(ctx, st); err != nil {
				s.cfg.Logger.Warn("slicer: read failed", "room", room, "err", err)
				continue
			}
		}
		storeNow, err := s.cfg.Streams.Now(ctx)
		if err != nil || now.Before(retryAt) {
			continue
		}
		for s.due(st.next, storeNow) {
			if err := s.writeSecond(ctx, st, storeNow); err != nil {
				failures++
				retryAt = now.Add(backoff(failures))
				s.m.writeErrors.Inc()
				if failures == 1 || failures%20 == 0 {
					s.cfg.Logger.Warn("slicer: write failed; will retry in order", "room", room, "second", st.next, "failures", failures, "err", err)
				}
				break
			}
			if failures > 0 {
				s.cfg.Logger.Info("slicer: writes recovered", "room", room, "failures", failures)
			}
			failures = 0
		}
		if behind := storeNow.Sub(time.UnixMilli((st.next + 1) * 1000).Add(s.cfg.PublishDelay)); behind > 0 {
			s.m.behind.Set(behind.Seconds())
		} else {
			s.m.behind.Set(0)
		}
	}
}

// backoff is the wait before the n-th retry of a failed write: 100 ms
// doubling to 2 s. Seconds are written in order, so a retry holds back the
// seconds after it; a short cap keeps the catch-up prompt once S3 is back.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n-1, 5)
	return min(d, 2*time.Second)
}

// reclaim takes over the messages its predecessor read but did not settle
// (XAUTOCLAIM). A message whose second was already written is looked up in
// that segment: if the segment holds it, it is settled now; otherwise it goes
// into the next second. So a takeover neither loses nor repeats a message.
func (s *Slicer) reclaim(ctx context.Context, st *roomState) error {
	old := map[int64][]wire.Message{}
	for _, lane := range []stream.Lane{stream.Live, stream.Barrage} {
		key := stream.Key{Room: st.room, Lane: lane}
		for {
			es, err := s.cfg.Streams.Claim(ctx, key, s.cfg.Group, s.cfg.NodeID, 0, readBatch)
			if err != nil {
				return fmt.Errorf("slicer: reclaim %s: %w", st.room, err)
			}
			for _, e := range es {
				sec, err := wire.SecondOf(e.ID)
				if err != nil {
					continue
				}
				if sec >= st.next {
					st.add(sec, e)
				} else {
					old[sec] = append(old[sec], e)
				}
			}
			if len(es) < readBatch {
				break
			}
		}
	}
	for sec, msgs := range old {
		var has map[string]bool
		seg, err := s.readExisting(ctx, st.room, sec)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			return err
		default:
			has = identities(seg)
		}
		var settled []wire.Message
		for _, m := range msgs {
			if has[m.Identity()] {
				settled = append(settled, m)
			} else {
				st.add(st.next, m)
			}
		}
		s.ack(ctx, st.room, settled)
		s.m.reclaimed.Add(float64(len(msgs)))
	}
	return nil
}

// identities returns the identities a segment holds, merged ones included.
func identities(seg *wire.Segment) map[string]bool {
	has := make(map[string]bool, len(seg.Messages))
	for _, m := range seg.Messages {
		has[m.Identity()] = true
		for _, id := range m.Merged {
			has[wire.IdentityOf(m.Kind, id)] = true
		}
	}
	return has
}

func (s *Slicer) due(second int64, storeNow time.Time) bool {
	return !storeNow.Before(time.UnixMilli((second + 1) * 1000).Add(s.cfg.PublishDelay))
}

// resume picks up where the manifest says the room stands; a room without
// one starts at the second it was opened.
func (s *Slicer) resume(ctx context.Context, room string, opened time.Time) (*roomState, error) {
	st := &roomState{room: room, pending: map[int64][]wire.Message{}, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	now, err := s.cfg.Streams.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("slicer: store time: %w", err)
	}
	cur := now.Unix()
	obj, err := s.cfg.Objects.Get(ctx, wire.ManifestKey(room))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		st.next, st.seq = cur, 1
		if o := opened.Unix(); !opened.IsZero() && o < cur && cur-o <= maxCatchUp {
			st.next = o
		}
	case err != nil:
		return nil, fmt.Errorf("slicer: read manifest: %w", err)
	default:
		m, derr := wire.DecodeManifest(obj.Body)
		if derr != nil {
			return nil, fmt.Errorf("slicer: manifest of %s: %w", room, derr)
		}
		st.etag = obj.ETag
		st.next, st.seq = m.Second+1, m.Seq+1
		if cur-st.next > maxCatchUp {
			st.next = cur
		}
	}
	return st, nil
}

// read drains what the group has for both lanes into pending, by second.
func (s *Slicer) read(ctx context.Context, st *roomState) error {
	for _, lane := range []stream.Lane{stream.Live, stream.Barrage} {
		key := stream.Key{Room: st.room, Lane: lane}
		for {
			es, err := s.cfg.Streams.ReadGroup(ctx, key, s.cfg.Group, s.cfg.NodeID, readBatch, 0)
			if err != nil {
				return err
			}
			for _, e := range es {
				sec, err := wire.SecondOf(e.ID)
				if err != nil {
					continue
				}
				st.add(sec, e)
			}
			if len(es) < readBatch {
				break
			}
		}
	}
	return nil
}

func (s *Slicer) queueOf(m *wire.Message) Queue {
	switch m.Kind {
	case wire.KindSystem:
		return QueueSystem
	case wire.KindGift:
		if m.Value*int64(max(m.Count, 1)) >= s.cfg.HighGiftValue {
			return QueueHighGift
		}
		return QueueLowGift
	}
	return QueueBarrage
}

// writeSecond builds, writes and acknowledges st.next.
func (s *Slicer) writeSecond(ctx context.Context, st *roomState, storeNow time.Time) error {
	sec := st.next
	fresh := st.pending[sec]
	sort.Slice(fresh, func(i, j int) bool { return wire.CompareIDs(fresh[i].ID, fresh[j].ID) < 0 })

	var queues [numQueues][]wire.Message
	for q := range numQueues {
		queues[q] = append(queues[q], st.carry[q]...)
	}
	var gifts []wire.Message
	for _, m := range fresh {
		if m.Kind == wire.KindGift {
			gifts = append(gifts, m)
			continue
		}
		q := s.queueOf(&m)
		queues[q] = append(queues[q], m)
	}
	for _, g := range mergeGifts(gifts) {
		q := s.queueOf(&g)
		queues[q] = append(queues[q], g)
	}

	b := s.budget.Load()
	var need [numQueues]int
	for q := range numQueues {
		need[q] = len(queues[q])
	}
	got := allocate(b.budget, b.shares, need)

	var out []wire.Message
	var carry [numQueues][]wire.Message
	sampled := 0
	for q := range numQueues {
		msgs := queues[q]
		if q.droppable() {
			kept := sample(msgs, got[q], st.rng)
			sampled += len(msgs) - len(kept)
			msgs = kept
		} else if got[q] < len(msgs) {
			carry[q] = msgs[got[q]:]
			msgs = msgs[:got[q]]
		}
		for _, m := range msgs {
			out = append(out, wire.Slim(m))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return wire.CompareIDs(out[i].ID, out[j].ID) < 0 })

	seg := &wire.Segment{V: wire.Version, Room: st.room, Second: sec, Seq: st.seq, Dur: wire.SegmentDuration, Messages: out}
	body, err := wire.EncodeSegment(seg)
	if err != nil {
		return err
	}
	var (
		settled []wire.Message
		existed bool
	)
	start := s.cfg.Clock.Now()
	_, err = s.cfg.Objects.Put(ctx, wire.SegmentKey(st.room, sec), body, objstore.PutOptions{
		ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true,
	})
	switch {
	case errors.Is(err, objstore.ErrPrecondition):
		// A predecessor wrote this second. Its segment is the truth: keep its
		// seq, and carry what it lacks of ours (never-droppable only) forward.
		existing, rerr := s.readExisting(ctx, st.room, sec)
		if rerr != nil {
			return rerr
		}
		s.m.written.WithLabelValues("existed").Inc()
		has := identities(existing)
		carry = [numQueues][]wire.Message{}
		existed = true
		for q := range numQueues {
			for _, m := range queues[q] {
				switch {
				case has[m.Identity()]:
					settled = append(settled, m)
				case q.droppable():
					s.m.drops.WithLabelValues("superseded").Inc()
					settled = append(settled, m)
				default:
					carry[q] = append(carry[q], m)
				}
			}
		}
		seg = existing
	case err != nil:
		return fmt.Errorf("slicer: put segment %s/%d: %w", st.room, sec, err)
	default:
		s.m.written.WithLabelValues("written").Inc()
		s.m.bytes.Observe(float64(len(body)))
		s.m.latency.Observe(s.cfg.Clock.Now().Sub(start).Seconds())
		for q := range numQueues {
			n := got[q]
			if !q.droppable() {
				n = len(queues[q]) - len(carry[q])
			}
			s.m.perQueue.WithLabelValues(Queue(q).String()).Add(float64(n))
		}
		if sampled > 0 {
			s.m.drops.WithLabelValues("sampled").Add(float64(sampled))
		}
	}

	// The segment is durable: acknowledge what it settled (written or
	// sampled away) and trim behind the oldest message not yet written.
	// Carried messages stay pending, so a successor leader reclaims them.
	if !existed {
		for q := range numQueues {
			if q.droppable() {
				settled = append(settled, queues[q]...)
				continue
			}
			settled = append(settled, queues[q][:len(queues[q])-len(carry[q])]...)
		}
	}
	s.ack(ctx, st.room, settled)
	st.carry = carry
	st.npending -= len(st.pending[sec])
	delete(st.pending, sec)
	st.seq = seg.Seq + 1
	st.next = sec + 1
	s.trim(ctx, st)
	s.publishManifest(ctx, st, seg)
	due := time.UnixMilli((sec + 1) * 1000).Add(s.cfg.PublishDelay)
	s.m.lag.Set(storeNow.Sub(due).Seconds())
	n := 0
	for q := range numQueues {
		n += len(carry[q])
	}
	s.m.carried.Set(float64(n))
	return nil
}

func (s *Slicer) readExisting(ctx context.Context, room string, sec int64) (*wire.Segment, error) {
	obj, err := s.cfg.Objects.Get(ctx, wire.SegmentKey(room, sec))
	if err != nil {
		return nil, fmt.Errorf("slicer: read existing segment %s/%d: %w", room, sec, err)
	}
	seg, err := wire.DecodeSegment(obj.Body)
	if err != nil {
		return nil, fmt.Errorf("slicer: existing segment %s/%d: %w", room, sec, err)
	}
	return seg, nil
}

// ack acknowledges msgs (and the ids merged into them) on their lanes.
func (s *Slicer) ack(ctx context.Context, room string, msgs []wire.Message) {
	var live, barrage []string
	for _, m := range msgs {
		ids := m.Merged
		if len(ids) == 0 {
			ids = []string{m.ID}
		}
		if m.Kind == wire.KindBarrage {
			barrage = append(barrage, ids...)
		} else {
			live = append(live, ids...)
		}
	}
	if len(live) > 0 {
		_ = s.cfg.Streams.Ack(ctx, stream.Key{Room: room, Lane: stream.Live}, s.cfg.Group, live...)
	}
	if len(barrage) > 0 {
		_ = s.cfg.Streams.Ack(ctx, stream.Key{Room: room, Lane: stream.Barrage}, s.cfg.Group, barrage...)
	}
}

// trim removes stream entries behind the oldest message not yet in a
// segment: carried messages and messages read for later seconds (or late
// for an earlier one) hold the floor of their lane back.
func (s *Slicer) trim(ctx context.Context, st *roomState) {
	floor := wire.FormatID(st.next*1000, 0)
	floors := [2]string{floor, floor} // by lane: barrage, live
	lower := func(m *wire.Message) {
		i := 1
		if m.Kind == wire.KindBarrage {
			i = 0
		}
		ids := m.Merged
		if len(ids) == 0 {
			ids = []string{m.ID}
		}
		for _, id := range ids {
			if wire.CompareIDs(id, floors[i]) < 0 {
				floors[i] = id
			}
		}
	}
	for q := range numQueues {
		for i := range st.carry[q] {
			lower(&st.carry[q][i])
		}
	}
	for _, msgs := range st.pending {
		for i := range msgs {
			lower(&msgs[i])
		}
	}
	_ = s.cfg.Streams.TrimBefore(ctx, stream.Key{Room: st.room, Lane: stream.Barrage}, floors[0])
	_ = s.cfg.Streams.TrimBefore(ctx, stream.Key{Room: st.room, Lane: stream.Live}, floors[1])
}

// publishManifest moves the manifest forward to seg, never back.
func (s *Slicer) publishManifest(ctx context.Context, st *roomState, seg *wire.Segment) {
	body, err := wire.EncodeManifest(&wire.Manifest{V: wire.Version, Room: st.room, Second: seg.Second, Seq: seg.Seq, Dur: wire.SegmentDuration})
	if err != nil {
		return
	}
	for attempt := 0; attempt < 3; attempt++ {
		opts := objstore.PutOptions{ContentType: wire.ManifestContentType, CacheControl: wire.ManifestCacheControl}
		if st.etag == "" {
			opts.IfNoneMatch = true
		} else {
			opts.IfMatch = st.etag
		}
		etag, err := s.cfg.Objects.Put(ctx, wire.ManifestKey(st.room), body, opts)
		if err == nil {
			st.etag = etag
			return
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			s.cfg.Logger.Warn("slicer: manifest write failed", "room", st.room, "err", err)
			return
		}
		// Someone else moved it: re-read, and only write if we are ahead.
		obj, gerr := s.cfg.Objects.Get(ctx, wire.ManifestKey(st.room))
		if gerr != nil {
			if errors.Is(gerr, objstore.ErrNotFound) {
				st.etag = ""
				continue
			}
			return
		}
		st.etag = obj.ETag
		if m, derr := wire.DecodeManifest(obj.Body); derr == nil && m.Second >= seg.Second {
			return
		}
	}
}
