package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/objstore"
)

// Defaults of Config.
const (
	defaultMaxPartBytes = 4 << 20
	defaultMaxBytes     = 256 << 20
	defaultRetention    = 30 * 24 * time.Hour
	defaultSweepEvery   = time.Hour
	defaultWriters      = 4
	defaultPutTimeout   = 10 * time.Second
	// tickEvery is how often Run looks for ended minutes: a minute's
	// objects are written within about a second of its end.
	tickEvery = time.Second
	// retryMin and retryMax bound the backoff of a failed write.
	retryMin = 500 * time.Millisecond
	retryMax = 30 * time.Second
	shards   = 16
	maxNode  = 64
)

// Config configures a Recorder.
type Config struct {
	// Store keeps the objects. Required. It must not be a store the CDN
	// serves (see Prefix). When it is an objstore.Lister, the Recorder
	// deletes objects older than Retention itself.
	Store objstore.Store
	// Node names this node in its keys (sanitised to A-Z a-z 0-9 _ -, at
	// most 64 bytes). Required.
	Node string
	// MaxPartBytes is the raw size at which a room's batch is written
	// before its minute ends, as a further part. Zero: 4 MiB (about 25,000
	// records).
	MaxPartBytes int
	// MaxBytes bounds the records held in memory, batching or waiting to
	// be written. A record beyond it is lost, counted and reported in the
	// room's next object header. Zero: 256 MiB.
	MaxBytes int64
	// Retention is how long objects are kept. Zero: 30 days.
	Retention time.Duration
	// SweepEvery is how often objects past Retention are deleted. Zero:
	// hourly. Negative: never (for a bucket whose own lifecycle rule
	// expires them; the roles do not assume one and sweep).
	SweepEvery time.Duration
	// Writers is how many objects are written at once. Zero: 4.
	Writers int
	// PutTimeout bounds one write. Zero: 10 s.
	PutTimeout time.Duration
	// Clock stamps records and decides minutes. Nil: real clock.
	Clock clock.Clock
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Recorder batches records and writes them. New starts nothing; Run writes
// (and sweeps) until its context ends; Shutdown writes what is left.
type Recorder struct {
	cfg    Config
	clk    clock.Clock
	timers clock.Timers // clk's timers when it has them (clock.TimersOf)
	log    *slog.Logger
	node   string
	nonce  string
	seed   maphash.Seed
	lister objstore.Lister

	shards [shards]recShard
	held   atomic.Int64 // raw bytes batching or queued
	// seq numbers this process's parts: with the node and the nonce it
	// makes every key unique, so a key found written (IfNoneMatch) can
	// only be this part's own earlier attempt.
	seq    atomic.Int64
	closed atomic.Bool

	qmu   sync.Mutex
	queue []*part
	wake  chan struct{}

	lostWarn atomic.Int64 // unix second of the last "records lost" warning

	shutOnce sync.Once
	shutErr  error

	recorded   *prometheus.CounterVec
	written    prometheus.Counter
	objects    *prometheus.CounterVec
	flushErrs  prometheus.Counter
	lost       *prometheus.CounterVec
	heldGauge  prometheus.GaugeFunc
	deleted    prometheus.Counter
	sweepErrs  prometheus.Counter
	queuedObjs prometheus.GaugeFunc
}

type recShard struct {
	mu      sync.Mutex
	rooms   map[string]*batch
	scratch []byte // one encoded line
}

// A batch's lines are kept in chunks, never in one growing buffer, so each
// line is copied once. Chunks double from firstChunk to chunkSize, so a
// quiet room's batch holds about what it uses (MaxBytes counts the lines,
// not the chunks' spare room: at most about as much again).
const (
	firstChunk = 1 << 10
	chunkSize  = 64 << 10
)

// batch is one room's records of one minute not yet sealed.
type batch struct {
	minute int64 // unix minute
	chunks [][]byte
	size   int
	n      int
	lost   int64 // records lost since the last sealed part
}

// add appends one line.
func (b *batch) add(line []byte) {
	last := len(b.chunks) - 1
	if last < 0 || len(b.chunks[last])+len(line) > cap(b.chunks[last]) {
		size := firstChunk
		if last >= 0 {
			size = min(2*cap(b.chunks[last]), chunkSize)
		}
		b.chunks = append(b.chunks, make([]byte, 0, max(size, len(line))))
		last++
	}
	b.chunks[last] = append(b.chunks[last], line...)
	b.size += len(line)
}

// part is a sealed batch waiting to be written.
type part struct {
	room   string
	minute int64
	part   int
	lines  [][]byte
	size   int
	n      int
	lost   int64
	early  bool
}

// New checks cfg and returns a Recorder.
func New(cfg Config) (*Recorder, error) {
	if cfg.Store == nil {
		return nil, errors.New("audit: Store is required")
	}
	node := sanitizeNode(cfg.Node)
	if node == "" {
		return nil, errors.New("audit: Node is required")
	}
	if cfg.MaxPartBytes < 0 || cfg.MaxBytes < 0 || cfg.Retention < 0 || cfg.Writers < 0 || cfg.PutTimeout < 0 {
		return nil, errors.New("audit: negative setting")
	}
	if cfg.MaxPartBytes == 0 {
		cfg.MaxPartBytes = defaultMaxPartBytes
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = defaultMaxBytes
	}
	if int64(cfg.MaxPartBytes) > cfg.MaxBytes {
		return nil, fmt.Errorf("audit: MaxPartBytes %d exceeds MaxBytes %d", cfg.MaxPartBytes, cfg.MaxBytes)
	}
	if cfg.Retention == 0 {
		cfg.Retention = defaultRetention
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = defaultSweepEvery
	}
	if cfg.Writers == 0 {
		cfg.Writers = defaultWriters
	}
	if cfg.PutTimeout == 0 {
		cfg.PutTimeout = defaultPutTimeout
	}
	lister, _ := cfg.Store.(objstore.Lister)
	if cfg.SweepEvery > 0 && lister == nil {
		return nil, errors.New("audit: the store cannot list, so it cannot be held to Retention; set SweepEvery negative and expire objects otherwise")
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Recorder{
		cfg: cfg, clk: clock.Or(cfg.Clock), timers: clock.TimersOf(cfg.Clock), log: cfg.Logger, node: node, nonce: newNonce(),
		seed: maphash.MakeSeed(), lister: lister, wake: make(chan struct{}, 1),
	}
	for i := range r.shards {
		r.shards[i].rooms = map[string]*batch{}
	}
	r.recorded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_audit_records_total",
		Help: "Comments recorded in the audit trail, by decision and reason (stored, masked = filtered and stored, dropped or rejected by a layer).",
	}, []string{"decision", "reason"})
	r.written = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_audit_records_written_total",
		Help: "Audit records written to object storage.",
	})
	r.objects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_audit_objects_written_total",
		Help: "Audit objects written, by kind (minute: a minute ended; early: a batch reached MaxPartBytes; final: at shutdown).",
	}, []string{"kind"})
	r.flushErrs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_audit_flush_errors_total",
		Help: "Failed audit object writes (each is retried).",
	})
	r.lost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_audit_records_lost_total",
		Help: "Audit records not kept, by reason (overflow: memory bound reached; shutdown: not written before shutdown ended; closed: recorded after shutdown). Each gap is also in the room's next object header.",
	}, []string{"reason"})
	r.heldGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "danmaku_audit_held_bytes",
		Help: "Audit records held in memory (batching or waiting to be written), in raw bytes.",
	}, func() float64 { return float64(r.held.Load()) })
	r.queuedObjs = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "danmaku_audit_queued_objects",
		Help: "Audit objects sealed and waiting to be written.",
	}, func() float64 { r.qmu.Lock(); defer r.qmu.Unlock(); return float64(len(r.queue)) })
	r.deleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_audit_objects_deleted_total",
		Help: "Audit objects deleted past the retention.",
	})
	r.sweepErrs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_audit_sweep_errors_total",
		Help: "Failed retention sweeps.",
	})
	for _, c := range []prometheus.Collector{r.recorded, r.written, r.objects, r.flushErrs, r.lost, r.heldGauge, r.queuedObjs, r.deleted, r.sweepErrs} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("audit: metrics: %w", err)
		}
	}
	return r, nil
}

func sanitizeNode(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if b.Len() == maxNode {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func newNonce() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Node returns the node name the keys carry; Nonce this process's.
func (r *Recorder) Node() string  { return r.node }
func (r *Recorder) Nonce() string { return r.nonce }

// Record adds rec to its room's batch. It never blocks on I/O: the only
// wait is the room shard's lock while one line is appended. A zero At is
// the Recorder's clock's now. A record beyond MaxBytes, or after Shutdown,
// is counted as lost (and the gap reported in the room's next object).
func (r *Recorder) Record(rec Record) {
	if rec.At.IsZero() {
		rec.At = r.clk.Now()
	}
	if rec.Room == "" || !rec.Decision.Valid() {
		// A caller's bug: keep the record visible rather than drop it.
		r.log.Error("audit: record with no room or an unknown decision", "room", rec.Room, "decision", rec.Decision)
		if rec.Room == "" {
			rec.Room = "_"
		}
		if !rec.Decision.Valid() {
			rec.Reason = string(rec.Decision) + "/" + rec.Reason
			rec.Decision = Dropped
		}
	}
	r.recorded.WithLabelValues(string(rec.Decision), rec.Reason).Inc()
	minute := rec.At.UnixMilli() / 60_000
	sh := &r.shards[maphash.String(r.seed, rec.Room)%shards]
	sh.mu.Lock()
	b := sh.rooms[rec.Room]
	if b == nil {
		b = &batch{minute: minute}
		sh.rooms[rec.Room] = b
	}
	if r.closed.Load() {
		b.lost++
		sh.mu.Unlock()
		r.lose("closed", 1)
		return
	}
	if minute > b.minute {
		// The room's minute ended: its batch goes. A record of an earlier minute (a clock a hair behind)
		// joins the current batch; readers go by each record's own time.
		if b.n > 0 || b.lost > 0 {
			r.seal(rec.Room, b, false)
		}
		b.minute = minute
	}
	sh.scratch = appendLine(sh.scratch[:0], &rec)
	grew := int64(len(sh.scratch))
	if r.held.Add(grew) > r.cfg.MaxBytes {
		r.held.Add(-grew)
		b.lost++
		sh.mu.Unlock()
		r.lose("overflow", 1)
		return
	}
	b.add(sh.scratch)
	b.n++
	var sealed bool
	if b.size >= r.cfg.MaxPartBytes {
		r.seal(rec.Room, b, true)
		sealed = true
	}
	sh.mu.Unlock()
	if sealed {
		r.kick()
	}
}

// lose counts lost records and warns at most once a second.
func (r *Recorder) lose(reason string, n int64) {
	r.lost.WithLabelValues(reason).Add(float64(n))
	now := r.clk.Now().Unix()
	if last := r.lostWarn.Load(); now > last && r.lostWarn.CompareAndSwap(last, now) {
		r.log.Error("audit: records lost; the gap is noted in the next object of each room", "reason", reason, "held_bytes", r.held.Load())
	}
}

// seal moves b's records to the write queue; the caller holds b's shard.
func (r *Recorder) seal(room string, b *batch, early bool) {
	p := &part{room: room, minute: b.minute, part: int(r.seq.Add(1)), lines: b.chunks, size: b.size, n: b.n, lost: b.lost, early: early}
	b.chunks, b.size, b.n, b.lost = nil, 0, 0, 0
	r.qmu.Lock()
	r.queue = append(r.queue, p)
	r.qmu.Unlock()
}

func (r *Recorder) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// sealEnded seals every batch whose minute ended before now (all of them
// when all is set) and forgets rooms that have nothing left.
func (r *Recorder) sealEnded(now time.Time, all bool) {
	cur := now.UnixMilli() / 60_000
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for room, b := range sh.rooms {
			if !all && b.minute >= cur {
				continue
			}
			if b.n > 0 || b.lost > 0 {
				r.seal(room, b, false)
			} else if !all {
				delete(sh.rooms, room) // idle
			}
		}
		sh.mu.Unlock()
	}
}

func (r *Recorder) pop() *part {
	r.qmu.Lock()
	defer r.qmu.Unlock()
	if len(r.queue) == 0 {
		return nil
	}
	p := r.queue[0]
	r.queue[0] = nil
	r.queue = r.queue[1:]
	return p
}

func (r *Recorder) pushFront(p *part) {
	r.qmu.Lock()
	r.queue = append([]*part{p}, r.queue...)
	r.qmu.Unlock()
}

// write puts one part.
func (r *Recorder) write(ctx context.Context, p *part, kind string) error {
	minute := time.Unix(p.minute*60, 0)
	body, err := Encode(Header{Room: p.room, Node: r.node, Minute: MinuteName(minute), Part: p.part, Lost: p.lost}, p.lines, p.n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PutTimeout)
	defer cancel()
	key := ObjectKey(p.room, minute, r.node, r.nonce, p.part)
	// IfNoneMatch: a key is written once. A retry whose first attempt
	// landed (the answer was lost) meets its own object and is done.
	_, err = r.cfg.Store.Put(ctx, key, body, objstore.PutOptions{ContentType: "application/x-ndjson", IfNoneMatch: true})
	if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
		r.flushErrs.Inc()
		return fmt.Errorf("audit: write %s: %w", key, err)
	}
	if p.early && kind == "minute" {
		kind = "early"
	}
	r.objects.WithLabelValues(kind).Inc()
	r.written.Add(float64(p.n))
	r.held.Add(-int64(p.size))
	return nil
}

// Flush seals the batches of minutes that ended and writes every sealed
// part once, in the caller's goroutine (tests; Run does this itself). A
// part that fails stays queued and the first error is returned.
func (r *Recorder) Flush(ctx context.Context) error {
	r.sealEnded(r.clk.Now(), false)
	return r.drain(ctx, "minute")
}

func (r *Recorder) drain(ctx context.Context, kind string) error {
	var failed []*part
	var first error
	for p := r.pop(); p != nil; p = r.pop() {
		if err := r.write(ctx, p, kind); err != nil {
			failed = append(failed, p)
			if first == nil {
				first = err
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	for i := len(failed) - 1; i >= 0; i-- {
		r.pushFront(failed[i])
	}
	return first
}

// Run writes sealed parts with Writers goroutines, seals each minute as it
// ends, and sweeps past Retention, until ctx is done. Call Shutdown after
// it returns (or concurrently) to write what is left.
func (r *Recorder) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.cfg.Writers {
		wg.Go(func() { r.writer(ctx) })
	}
	if r.cfg.SweepEvery > 0 {
		wg.Go(func() { r.sweeper(ctx) })
	}
	t, tick := r.timers.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-tick:
			r.sealEnded(r.clk.Now(), false)
			r.kickAll()
		}
	}
}

// kickAll wakes writers while there is work: one token wakes one writer,
// which passes it on when more is queued.
func (r *Recorder) kickAll() {
	r.qmu.Lock()
	n := len(r.queue)
	r.qmu.Unlock()
	if n > 0 {
		r.kick()
	}
}

func (r *Recorder) writer(ctx context.Context) {
	backoff := retryMin
	for {
		p := r.pop()
		if p == nil {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		r.kickAll() // more queued: wake another writer
		if err := r.write(ctx, p, "minute"); err != nil {
			r.pushFront(p)
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("audit: write failed; retrying", "room", p.room, "records", p.n, "retry_in", backoff, "err", err)
			if clock.Sleep(ctx, r.timers, backoff) != nil {
				return
			}
			backoff = min(2*backoff, retryMax)
			continue
		}
		backoff = retryMin
	}
}

// Shutdown stops taking records (later ones are counted lost), seals
// every batch and writes everything left until ctx ends; what it could not
// write is counted lost and returned as an error. Safe to call twice.
func (r *Recorder) Shutdown(ctx context.Context) error {
	r.shutOnce.Do(func() {
		r.closed.Store(true)
		r.sealEnded(r.clk.Now(), true)
		var err error
		for {
			if err = r.drain(ctx, "final"); err == nil || ctx.Err() != nil {
				break
			}
			_ = clock.Sleep(ctx, r.timers, retryMin) // ctx's end ends the loop
		}
		if err == nil {
			return
		}
		var n int64
		for p := r.pop(); p != nil; p = r.pop() {
			n += int64(p.n)
			r.held.Add(-int64(p.size))
		}
		r.lost.WithLabelValues("shutdown").Add(float64(n))
		r.log.Error("audit: records not written at shutdown", "records", n, "err", err)
		r.shutErr = fmt.Errorf("audit: %d records not written at shutdown: %w", n, err)
	})
	return r.shutErr
}

func (r *Recorder) sweeper(ctx context.Context) {
	t, tick := r.timers.NewTicker(r.cfg.SweepEvery)
	defer t.Stop()
	for {
		if n, err := r.Sweep(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.sweepErrs.Inc()
			r.log.Warn("audit: retention sweep failed", "deleted", n, "err", err)
		} else if n > 0 {
			r.log.Info("audit: deleted objects past the retention", "objects", n, "retention", r.cfg.Retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// Sweep deletes the objects whose minute ended more than Retention ago
// and returns how many it deleted. Rooms are visited one by one (the first
// key after the previous room's), and within a room the listing stops at
// the first object kept, so a sweep costs about the objects it deletes.
func (r *Recorder) Sweep(ctx context.Context) (int, error) {
	if r.lister == nil {
		return 0, errors.New("audit: the store cannot list")
	}
	return sweep(ctx, r.lister, r.clk.Now().Add(-r.cfg.Retention), func() { r.deleted.Inc() })
}

func sweep(ctx context.Context, l objstore.Lister, cutoff time.Time, deleted func()) (int, error) {
	n, cursor := 0, ""
	for {
		room := ""
		if err := l.List(ctx, Prefix, cursor, func(key string) bool {
			room, _, _ = KeyMinute(key)
			if room == "" { // a stray key: step over it
				cursor = key
				return true
			}
			return false
		}); err != nil {
			return n, err
		}
		if room == "" {
			return n, nil
		}
		var old []string
		if err := l.List(ctx, RoomPrefix(room), "", func(key string) bool {
			_, m, ok := KeyMinute(key)
			if ok && !m.Add(time.Minute).Before(cutoff) {
				return false
			}
			if ok {
				old = append(old, key)
			}
			return true
		}); err != nil {
			return n, err
		}
		for _, k := range old {
			if err := l.Delete(ctx, k); err != nil {
				return n, err
			}
			n++
			deleted()
		}
		// '~' sorts after every minute name, and before any other room
		// whose name continues this one's.
		cursor = RoomPrefix(room) + "~"
	}
}
