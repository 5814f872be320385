package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"danmaku/internal/clock"
	"danmaku/sdk/wire"
)

var _ Store = (*RedisStore)(nil)

const (
	// defaultRedisPrefix starts every key when RedisConfig.Prefix is empty.
	defaultRedisPrefix = "danmaku"
	// defaultBlockStep bounds one blocking XREAD/XREADGROUP. Redis cannot be
	// told that a caller gave up, so a block longer than this is a series of
	// steps, and cancellation is noticed between two of them.
	defaultBlockStep = time.Second
	// defaultRegisterEvery is how often an appending process re-asserts a
	// room in the registry.
	defaultRegisterEvery = time.Minute
	// claimPage is the COUNT of one XAUTOCLAIM when the caller asked for all.
	claimPage = 100
	// maxGroupCreates bounds how often one ReadGroup recreates a group that
	// keeps vanishing (a stream deleted under it), so it fails instead of
	// spinning.
	maxGroupCreates = 3
)

// Entry fields. A message is stored as ONE msgpack field rather than a field
// per attribute: one XADD argument to build, one value to decode, and the
// encoding is the one segments and frames already use. The order id is kept
// beside it because wire.Message's msgpack tags leave Order out (segments must
// not carry it) while the stream keeps it for audit.
const (
	fieldMsg   = "m"
	fieldOrder = "o"
)

// openRoomScript registers a room with Redis's clock, in one round trip:
// HSETNX keeps the first open time. The value is built as a string (seconds
// followed by three digits of milliseconds) because Lua numbers are doubles
// printed with 14 significant digits. The script touches only KEYS[1], so it
// runs on Redis Cluster too.
const openRoomScript = `local t = redis.call('TIME')
return redis.call('HSETNX', KEYS[1], ARGV[1], t[1] .. string.format('%03d', math.floor(t[2] / 1000)))`

var openRoom = redis.NewScript(openRoomScript)

// RedisConfig configures a RedisStore.
type RedisConfig struct {
	// Client talks to Redis: a *redis.Client, *redis.ClusterClient or
	// failover client. Required. The store never closes it; its owner does.
	// The store does not depend on the client's ContextTimeoutEnabled option
	// (see RedisStore).
	Client redis.UniversalClient
	// Prefix starts every key. Empty: "danmaku". It must not contain '{' or
	// '}': a hash tag in the prefix would put every room in one cluster slot.
	Prefix string
	// BlockStep bounds a single blocking command; a longer block is several
	// in a row, and a cancelled context or Close is noticed between them (so
	// within BlockStep). Zero: 1 s.
	BlockStep time.Duration
	// RegisterEvery is how often a process that appends to a room
	// re-registers it (HSETNX, which never changes a recorded open time), so
	// that a registry lost with a Redis restart is rebuilt by the next
	// appends. Zero: 1 minute.
	RegisterEvery time.Duration
	// Clock times RegisterEvery and nothing else: entry ids and open times
	// come from Redis's clock. Nil: the real clock.
	Clock clock.Clock
	// Logger receives corrupt-entry and registry warnings. Nil: slog.Default().
	Logger *slog.Logger
}

// RedisStore is the Store of production: Redis Streams, one stream per room
// and lane.
//
// # Keys
//
// With the default prefix "danmaku", room ID's lanes are the streams
//
//	danmaku:{room:ID}:barrage
//	danmaku:{room:ID}:live
//
// Both share the hash tag {room:ID}, so on Redis Cluster a room's keys live
// in one slot (a script or transaction over them would work) while rooms
// spread over the cluster. The rooms registry is one hash,
//
//	danmaku:rooms   field = room id, value = first open time (unix ms, Redis clock)
//
// It has no hash tag and lives in its own slot, outside every room's: nothing
// ever touches it atomically with a stream. OpenRoom, and the first Append of
// a room in each RegisterEvery of this process, register the room with a
// small script (HSETNX of Redis's TIME); an Append sends it in the same
// pipeline as its XADDs, which go-redis splits by node on a cluster, so an
// Append stays one round trip. (A script doing the XADDs too would need the
// registry in the room's slot.)
//
// # Entries
//
// An entry holds the msgpack of the message in field "m" and, when set, the
// gift's order id in field "o". On read, the message's ID is the entry id. An
// entry that does not decode is skipped, counted (Corrupt) and logged; a
// consumer group also acknowledges it, so it is never delivered again.
//
// # Blocking and cancellation
//
// go-redis applies a context to a blocking command only through deadlines,
// and only with the client option ContextTimeoutEnabled; a cancelled context
// does not interrupt a command in flight. So blocking reads are a loop of
// BLOCK steps of at most BlockStep, each also cut to the context's deadline,
// that checks the context between steps: cancellation unblocks a read within
// BlockStep whatever the client's options.
//
// RedisStore is safe for concurrent use. It starts no goroutines.
type RedisStore struct {
	client        redis.UniversalClient
	prefix        string
	roomsKey      string
	blockStep     time.Duration
	registerEvery time.Duration
	clock         clock.Clock
	log           *slog.Logger

	registered sync.Map // room → time.Time (Clock) of this process's last registration
	corrupt    atomic.Uint64
	closed     atomic.Bool
}

// NewRedisStore applies cfg's defaults and returns a store. It sends nothing
// to Redis.
func NewRedisStore(cfg RedisConfig) (*RedisStore, error) {
	if cfg.Client == nil {
		return nil, errors.New("stream: redis store: Client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultRedisPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("stream: redis store: Prefix %q must not contain '{' or '}'", cfg.Prefix)
	}
	if cfg.BlockStep < 0 || cfg.RegisterEvery < 0 {
		return nil, errors.New("stream: redis store: BlockStep and RegisterEvery must not be negative")
	}
	if cfg.BlockStep == 0 {
		cfg.BlockStep = defaultBlockStep
	}
	if cfg.BlockStep < time.Millisecond {
		// BLOCK counts milliseconds, and BLOCK 0 means forever.
		cfg.BlockStep = time.Millisecond
	}
	if cfg.RegisterEvery == 0 {
		cfg.RegisterEvery = defaultRegisterEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RedisStore{
		client:        cfg.Client,
		prefix:        cfg.Prefix,
		roomsKey:      cfg.Prefix + ":rooms",
		blockStep:     cfg.BlockStep,
		registerEvery: cfg.RegisterEvery,
		clock:         clock.Or(cfg.Clock),
		log:           cfg.Logger,
	}, nil
}

// StreamKey returns the Redis key of k's stream (for operators and tests).
func (s *RedisStore) StreamKey(k Key) string {
	return s.prefix + ":{room:" + k.Room + "}:" + k.Lane.String()
}

// RoomsKey returns the Redis key of the rooms registry.
func (s *RedisStore) RoomsKey() string { return s.roomsKey }

// Corrupt returns how many undecodable entries reads have skipped.
func (s *RedisStore) Corrupt() uint64 { return s.corrupt.Load() }

// Close makes every later call fail with ErrClosed; blocked reads return
// within BlockStep. It does not close the client. Safe to call twice.
func (s *RedisStore) Close() error {
	s.closed.Store(true)
	return nil
}

// live returns ErrClosed after Close, else ctx's error. A deadline that has
// passed counts even before ctx reports it: a client with
// ContextTimeoutEnabled times the connection out at that very deadline, and
// the caller must see context.DeadlineExceeded rather than an i/o timeout.
func (s *RedisStore) live(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func opErr(op string, key Key, err error) error {
	return fmt.Errorf("stream: redis %s %s/%s: %w", op, key.Room, key.Lane, err)
}

// Append implements Store. The XADDs of a batch (and, once per RegisterEvery,
// the room's registration) go in one pipeline: one round trip. On error, a
// prefix of the batch may have been stored.
//
// The XADDs are sent at most once (xaddOnce): go-redis never resends them
// after an error that leaves open whether Redis ran them (a timeout, a
// broken connection), which a Cluster client otherwise does. It still
// follows MOVED and ASK, which a node answers instead of running the
// command. So an Append stores each message once or, after an error, at
// most once; only a caller that retries after an error (a client resending
// after a 503) can store a message twice.
func (s *RedisStore) Append(ctx context.Context, key Key, msgs []wire.Message) ([]wire.Message, error) {
	if err := s.live(ctx); err != nil {
		return nil, opErr("append", key, err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	// All messages are encoded into one buffer and sliced afterwards (the
	// buffer may move while it grows).
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	ends := make([]int, len(msgs))
	for i := range msgs {
		m := msgs[i]
		m.ID = "" // the entry id replaces it
		if err := enc.Encode(&m); err != nil {
			return nil, opErr("append", key, fmt.Errorf("encode message %d: %w", i, err))
		}
		ends[i] = buf.Len()
	}
	b := buf.Bytes()

	sk := s.StreamKey(key)
	now := s.clock.Now()
	register := key.Room != SiteRoom && s.needsRegister(key.Room, now)
	pipe := s.client.Pipeline()
	var reg *redis.Cmd
	if register {
		// EVAL, not EVALSHA: a pipeline cannot retry on NOSCRIPT, and this
		// runs once per room per RegisterEvery.
		reg = pipe.Eval(ctx, openRoomScript, []string{s.roomsKey}, key.Room)
	}
	adds := make([]*redis.StringCmd, len(msgs))
	start := 0
	for i := range msgs {
		args := []any{"xadd", sk, "*", fieldMsg, b[start:ends[i]]}
		if msgs[i].Order != "" {
			args = append(args, fieldOrder, msgs[i].Order)
		}
		adds[i] = redis.NewStringCmd(ctx, args...)
		_ = pipe.Process(ctx, xaddOnce{adds[i]})
		start = ends[i]
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below

	out := make([]wire.Message, len(msgs))
	for i, c := range adds {
		id, err := c.Result()
		if err != nil {
			return nil, opErr("append", key, fmt.Errorf("XADD %d of %d: %w", i+1, len(msgs), err))
		}
		out[i] = owned(msgs[i])
		out[i].ID = id
	}
	if register {
		// The messages are stored: a failed registration is retried by the
		// next append rather than failing this one (a retry would store the
		// batch twice).
		if err := reg.Err(); err != nil {
			s.log.Warn("stream: register room", "room", key.Room, "err", err)
		} else {
			s.registered.Store(key.Room, now)
		}
	}
	return out, nil
}

// xaddOnce is an XADD that go-redis must not send again once it may have
// reached Redis: NoRetry keeps it (and the rest of its node's share of a
// pipeline) out of go-redis's retries after network errors and timeouts.
// An XADD is not idempotent — each run appends an entry with a new id — so
// a resend after a timeout whose XADD had in fact run stores the message
// twice. MaxRetries -1 (redisx) turns those retries off on a single-server
// client, but a ClusterClient resends in its redirect loop (MaxRedirects)
// after a timeout or a broken connection too; turning that loop off would
// also lose MOVED/ASK, which NoRetry keeps: a node answers MOVED or ASK
// instead of running the command, so following it runs the XADD once.
type xaddOnce struct{ *redis.StringCmd }

// NoRetry implements redis.Cmder.
func (xaddOnce) NoRetry() bool { return true }

func (s *RedisStore) needsRegister(room string, now time.Time) bool {
	v, ok := s.registered.Load(room)
	return !ok || now.Sub(v.(time.Time)) >= s.registerEvery
}

// step returns the BLOCK of the next blocking command: what is left of the
// caller's block, at most BlockStep and at most what is left of ctx; -1 (no
// BLOCK argument) when the caller does not block.
func (s *RedisStore) step(ctx context.Context, deadline time.Time) time.Duration {
	if deadline.IsZero() {
		return -1
	}
	d := min(time.Until(deadline), s.blockStep)
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	// BLOCK counts milliseconds, and BLOCK 0 would wait forever.
	return max(d, time.Millisecond)
}

// blockDeadline returns when a read blocking for block gives up (zero: it
// does not block). Blocking is on real time, as Redis's BLOCK is.
func blockDeadline(block time.Duration) time.Time {
	if block <= 0 {
		return time.Time{}
	}
	return time.Now().Add(block)
}

// ReadGroup implements Store with XREADGROUP ... STREAMS key >. A missing
// group is created at the start of the stream (XGROUP CREATE ... 0 MKSTREAM)
// when Redis answers NOGROUP.
func (s *RedisStore) ReadGroup(ctx context.Context, key Key, group, consumer string, count int, block time.Duration) ([]Entry, error) {
	sk := s.StreamKey(key)
	deadline := blockDeadline(block)
	creates := 0
	for {
		if err := s.live(ctx); err != nil {
			return nil, opErr("read group", key, err)
		}
		step := s.step(ctx, deadline)
		res, err := s.client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: consumer, Streams: []string{sk, ">"},
			Count: int64(max(count, 0)), Block: step,
		}).Result()
		switch {
		case err == nil, errors.Is(err, redis.Nil): // redis.Nil: the block timed out
		case redis.HasErrorPrefix(err, "UNBLOCKED"):
			// The stream was deleted under the blocked read (FLUSHALL, DEL):
			// read again, which recreates the group.
			continue
		case redis.HasErrorPrefix(err, "NOGROUP") && creates < maxGroupCreates:
			creates++
			if err := s.createGroup(ctx, sk, group); err != nil {
				return nil, opErr("read group", key, err)
			}
			continue
		default:
			if cerr := s.live(ctx); cerr != nil {
				err = cerr
			}
			return nil, opErr("read group", key, err)
		}
		var got []redis.XMessage
		for _, st := range res {
			got = append(got, st.Messages...)
		}
		out, bad := s.decodeAll(sk, got)
		s.ackBad(ctx, sk, group, bad)
		if len(out) > 0 {
			return out, nil
		}
		if len(got) > 0 {
			continue // all corrupt, and acked: read on
		}
		if step < 0 || !time.Now().Before(deadline) {
			return nil, nil
		}
	}
}

func (s *RedisStore) createGroup(ctx context.Context, sk, group string) error {
	err := s.client.XGroupCreateMkStream(ctx, sk, group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create group %s: %w", group, err)
	}
	return nil
}

// ackBad acknowledges entries that will never decode, so that the group does
// not hold them pending forever. A failure only costs a later Claim another
// try.
func (s *RedisStore) ackBad(ctx context.Context, sk, group string, ids []string) {
	if len(ids) == 0 {
		return
	}
	if err := s.client.XAck(ctx, sk, group, ids...).Err(); err != nil {
		s.log.Warn("stream: ack corrupt entries", "key", sk, "group", group, "ids", ids, "err", err)
	}
}

// decodeAll decodes xs, returning the messages and the ids of entries that
// did not decode.
func (s *RedisStore) decodeAll(sk string, xs []redis.XMessage) (out []Entry, bad []string) {
	if len(xs) == 0 {
		return nil, nil
	}
	out = make([]Entry, 0, len(xs))
	for _, x := range xs {
		m, err := decodeEntry(x)
		if err != nil {
			s.corrupt.Add(1)
			s.log.Warn("stream: skipping corrupt entry", "key", sk, "id", x.ID, "err", err)
			bad = append(bad, x.ID)
			continue
		}
		out = append(out, m)
	}
	return out, bad
}

// errNoMessage is the decode error of an entry without a message field: one
// deleted from the stream while pending (Redis < 7 reports those with no
// fields) or one some other writer added.
var errNoMessage = errors.New("no " + fieldMsg + " field")

func decodeEntry(x redis.XMessage) (Entry, error) {
	raw, ok := x.Values[fieldMsg].(string)
	if !ok {
		return Entry{}, errNoMessage
	}
	r := strings.NewReader(raw)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	// A skip first, as in package wire: it checks that every length the
	// input claims is backed by bytes before Decode allocates for it.
	dec.Reset(r)
	if err := dec.Skip(); err != nil {
		return Entry{}, err
	}
	r.Reset(raw)
	dec.Reset(r)
	var m wire.Message
	if err := dec.Decode(&m); err != nil {
		return Entry{}, err
	}
	m.ID = x.ID
	if o, ok := x.Values[fieldOrder].(string); ok {
		m.Order = o
	}
	return m, nil
}

// Claim implements Store with XAUTOCLAIM, following its cursor until the
// whole pending list was scanned or count entries were claimed. Entries that
// no longer exist are dropped from the pending list by Redis 7 itself (and
// reported as deleted ids, which need nothing more); corrupt ones are
// acknowledged.
func (s *RedisStore) Claim(ctx context.Context, key Key, group, consumer string, minIdle time.Duration, count int) ([]Entry, error) {
	if err := s.live(ctx); err != nil {
		return nil, opErr("claim", key, err)
	}
	sk := s.StreamKey(key)
	var out []Entry
	for cursor := "0-0"; ; {
		n := claimPage
		if count > 0 {
			n = count - len(out)
		}
		xs, next, _, err := s.client.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
			Stream: sk, Group: group, Consumer: consumer,
			MinIdle: max(minIdle, 0), Start: cursor, Count: int64(n),
		}).Result()
		if redis.HasErrorPrefix(err, "NOGROUP") {
			return out, nil // no group (or no stream): nothing pending
		}
		if err != nil {
			return nil, opErr("claim", key, err)
		}
		es, bad := s.decodeAll(sk, xs)
		s.ackBad(ctx, sk, group, bad)
		out = append(out, es...)
		if next == "0-0" || next == "" || (count > 0 && len(out) >= count) {
			return out, nil
		}
		if err := s.live(ctx); err != nil {
			return nil, opErr("claim", key, err)
		}
		cursor = next
	}
}

// PendingFloor implements Store with the summary form of XPENDING.
func (s *RedisStore) PendingFloor(ctx context.Context, key Key, group string) (string, bool, error) {
	if err := s.live(ctx); err != nil {
		return "", false, opErr("pending", key, err)
	}
	p, err := s.client.XPending(ctx, s.StreamKey(key), group).Result()
	if redis.HasErrorPrefix(err, "NOGROUP") || errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, opErr("pending", key, err)
	}
	if p.Count == 0 || p.Lower == "" {
		return "", false, nil
	}
	return p.Lower, true, nil
}

// Ack implements Store with XACK. Malformed ids are refused with ErrBadID
// (Redis would refuse the whole command).
func (s *RedisStore) Ack(ctx context.Context, key Key, group string, ids ...string) error {
	if err := s.live(ctx); err != nil {
		return opErr("ack", key, err)
	}
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if _, _, err := wire.ParseID(id); err != nil {
			return opErr("ack", key, fmt.Errorf("%w: %q", ErrBadID, id))
		}
	}
	if err := s.client.XAck(ctx, s.StreamKey(key), group, ids...).Err(); err != nil {
		return opErr("ack", key, err)
	}
	return nil
}

// DropGroup implements Store with XGROUP DESTROY; a stream that does not
// exist (expired, never written) has no group to drop.
func (s *RedisStore) DropGroup(ctx context.Context, key Key, group string) error {
	if err := s.live(ctx); err != nil {
		return opErr("drop group", key, err)
	}
	err := s.client.XGroupDestroy(ctx, s.StreamKey(key), group).Err()
	if err != nil && !strings.Contains(err.Error(), "requires the key to exist") {
		return opErr("drop group", key, err)
	}
	return nil
}

// TrimBefore implements Store with XTRIM key MINID = minID.
//
// Exact trimming, although "~" is cheaper (it only drops whole radix-tree
// nodes): the contract is that entries below minID are gone, and a group
// created afterwards (a new slicer leader starting from 0) must not be handed
// entries that were already written to a segment, which would show gifts
// twice. The slicer trims once a second per room, so exactness costs little.
func (s *RedisStore) TrimBefore(ctx context.Context, key Key, minID string) error {
	ms, seq, err := wire.ParseID(minID)
	if err != nil {
		return opErr("trim", key, fmt.Errorf("%w: %q", ErrBadID, minID))
	}
	if err := s.live(ctx); err != nil {
		return opErr("trim", key, err)
	}
	if err := s.client.XTrimMinID(ctx, s.StreamKey(key), wire.FormatID(ms, seq)).Err(); err != nil {
		return opErr("trim", key, err)
	}
	return nil
}

// Read implements Store with XREAD. "$" is resolved once, to the newest
// entry's id, so that an entry appended between two BLOCK steps is not
// missed; without a block it returns nothing, as XREAD without BLOCK does.
func (s *RedisStore) Read(ctx context.Context, key Key, after string, count int, block time.Duration) ([]Entry, error) {
	var from string
	switch after {
	case "", "0":
		from = "0-0"
	case "$":
	default:
		ms, seq, err := wire.ParseID(after)
		if err != nil {
			return nil, opErr("read", key, fmt.Errorf("%w: %q", ErrBadID, after))
		}
		from = wire.FormatID(ms, seq) // as Redis spells it
	}
	if err := s.live(ctx); err != nil {
		return nil, opErr("read", key, err)
	}
	sk := s.StreamKey(key)
	if after == "$" {
		if block <= 0 {
			return nil, nil
		}
		id, err := s.newestID(ctx, sk)
		if err != nil {
			return nil, opErr("read", key, err)
		}
		from = id
	}
	deadline := blockDeadline(block)
	for {
		if err := s.live(ctx); err != nil {
			return nil, opErr("read", key, err)
		}
		step := s.step(ctx, deadline)
		res, err := s.client.XRead(ctx, &redis.XReadArgs{
			Streams: []string{sk, from}, Count: int64(max(count, 0)), Block: step,
		}).Result()
		if redis.HasErrorPrefix(err, "UNBLOCKED") {
			continue // the stream was deleted under the blocked read: read again
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			if cerr := s.live(ctx); cerr != nil {
				err = cerr
			}
			return nil, opErr("read", key, err)
		}
		var got []redis.XMessage
		for _, st := range res {
			got = append(got, st.Messages...)
		}
		out, _ := s.decodeAll(sk, got)
		if len(out) > 0 {
			return out, nil
		}
		if len(got) > 0 {
			from = got[len(got)-1].ID // all corrupt: read on past them
			continue
		}
		if step < 0 || !time.Now().Before(deadline) {
			return nil, nil
		}
	}
}

// newestID returns the id of the newest entry in sk, "0-0" when there is
// none: XREVRANGE key + - COUNT 1, which is O(1), unlike XINFO STREAM's
// summary of the stream.
func (s *RedisStore) newestID(ctx context.Context, sk string) (string, error) {
	xs, err := s.client.XRevRangeN(ctx, sk, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(xs) == 0 {
		return "0-0", nil
	}
	return xs[0].ID, nil
}

// LastID implements Store. The newest entry's id comes from XREVRANGE; only
// a stream that exists but is empty (trimmed to nothing) costs a second
// command, XINFO STREAM, whose last-generated-id is what ids continue from —
// the same answer as the memory store's.
func (s *RedisStore) LastID(ctx context.Context, key Key) (string, error) {
	if err := s.live(ctx); err != nil {
		return "", opErr("last id", key, err)
	}
	sk := s.StreamKey(key)
	id, err := s.newestID(ctx, sk)
	if err != nil {
		return "", opErr("last id", key, err)
	}
	if id != "0-0" {
		return id, nil
	}
	info, err := s.client.XInfoStream(ctx, sk).Result()
	switch {
	case err == nil && info.LastGeneratedID != "":
		return info.LastGeneratedID, nil
	case err == nil, redis.HasErrorPrefix(err, "no such key"):
		return "0-0", nil
	}
	return "", opErr("last id", key, err)
}

// Rooms implements Store with HGETALL of the registry. A field whose value
// is not a unix millisecond time is skipped and logged: a room that starts
// from a made-up time would have the slicer write seconds nobody reads.
func (s *RedisStore) Rooms(ctx context.Context) ([]Room, error) {
	if err := s.live(ctx); err != nil {
		return nil, fmt.Errorf("stream: redis rooms: %w", err)
	}
	all, err := s.client.HGetAll(ctx, s.roomsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("stream: redis rooms: %w", err)
	}
	out := make([]Room, 0, len(all))
	for id, v := range all {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			s.log.Warn("stream: skipping malformed room registration", "key", s.roomsKey, "room", id, "value", v)
			continue
		}
		out = append(out, Room{ID: id, Opened: time.UnixMilli(ms)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// OpenRoom implements Store: HSETNX of the Redis TIME, in one script.
func (s *RedisStore) OpenRoom(ctx context.Context, room string) error {
	if err := s.live(ctx); err != nil {
		return fmt.Errorf("stream: redis open room %s: %w", room, err)
	}
	now := s.clock.Now()
	if err := openRoom.Run(ctx, s.client, []string{s.roomsKey}, room).Err(); err != nil {
		return fmt.Errorf("stream: redis open room %s: %w", room, err)
	}
	s.registered.Store(room, now)
	return nil
}

// Now implements Store with Redis's TIME: the clock that stamps entry ids.
// On Redis Cluster it is the clock of whichever node answers, which is
// good to the accuracy the nodes' clocks are kept to.
func (s *RedisStore) Now(ctx context.Context) (time.Time, error) {
	if err := s.live(ctx); err != nil {
		return time.Time{}, fmt.Errorf("stream: redis now: %w", err)
	}
	t, err := s.client.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("stream: redis now: %w", err)
	}
	return t, nil
}

// CloseRoom implements Store: the room leaves the registry, and its two
// stream keys expire after retention (PEXPIRE; 0 deletes them at once).
func (s *RedisStore) CloseRoom(ctx context.Context, room string, retention time.Duration) error {
	if err := s.live(ctx); err != nil {
		return fmt.Errorf("stream: redis close room %s: %w", room, err)
	}
	if err := s.client.HDel(ctx, s.roomsKey, room).Err(); err != nil {
		return fmt.Errorf("stream: redis close room %s: %w", room, err)
	}
	for _, lane := range []Lane{Barrage, Live} {
		k := s.StreamKey(Key{Room: room, Lane: lane})
		var err error
		if retention <= 0 {
			err = s.client.Del(ctx, k).Err()
		} else {
			err = s.client.PExpire(ctx, k, retention).Err()
		}
		if err != nil {
			return fmt.Errorf("stream: redis close room %s: %w", room, err)
		}
	}
	return nil
}

// drainRoomScript reads the clock and both lanes in one atomic step (TIME
// then XREADGROUP without BLOCK, which scripts may run): every entry
// stamped before the time it returns is delivered. NOGROUP comes back as an
// error reply the caller answers by creating the groups.
var drainRoomScript = redis.NewScript(`
local t = redis.call('TIME')
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], KEYS[2], '>', '>')
return {t[1], t[2], r}`)

// DrainRoom implements Store with one script call.
func (s *RedisStore) DrainRoom(ctx context.Context, room, group, consumer string, count int) (time.Time, []Entry, []Entry, error) {
	keys := []string{s.StreamKey(Key{Room: room, Lane: Barrage}), s.StreamKey(Key{Room: room, Lane: Live})}
	if count <= 0 {
		count = 1 << 20
	}
	for creates := 0; ; creates++ {
		if err := s.live(ctx); err != nil {
			return time.Time{}, nil, nil, fmt.Errorf("stream: redis drain %s: %w", room, err)
		}
		res, err := drainRoomScript.Run(ctx, s.client, keys, group, consumer, count).Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOGROUP") && creates < maxGroupCreates {
			for _, k := range keys {
				if cerr := s.createGroup(ctx, k, group); cerr != nil {
					return time.Time{}, nil, nil, fmt.Errorf("stream: redis drain %s: %w", room, cerr)
				}
			}
			continue
		}
		if err != nil {
			return time.Time{}, nil, nil, fmt.Errorf("stream: redis drain %s: %w", room, err)
		}
		if len(res) < 2 {
			return time.Time{}, nil, nil, fmt.Errorf("stream: redis drain %s: short reply", room)
		}
		sec, _ := strconv.ParseInt(fmt.Sprint(res[0]), 10, 64)
		usec, _ := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
		now := time.Unix(sec, usec*1000)
		var lanes [2][]redis.XMessage
		if len(res) > 2 {
			lanes = parseStreamsReply(keys, res[2])
		}
		b, badB := s.decodeAll(keys[0], lanes[0])
		l, badL := s.decodeAll(keys[1], lanes[1])
		s.ackBad(ctx, keys[0], group, badB)
		s.ackBad(ctx, keys[1], group, badL)
		return now, b, l, nil
	}
}

// parseStreamsReply reads an XREADGROUP reply as a script returns it —
// {{key, {{id, {field, value, ...}}, ...}}, ...} — into one message list
// per key of keys.
func parseStreamsReply(keys []string, v any) (out [2][]redis.XMessage) {
	streams, _ := v.([]any)
	for _, st := range streams {
		pair, _ := st.([]any)
		if len(pair) != 2 {
			continue
		}
		name := fmt.Sprint(pair[0])
		idx := -1
		for i, k := range keys {
			if k == name {
				idx = i
			}
		}
		if idx < 0 {
			continue
		}
		entries, _ := pair[1].([]any)
		for _, e := range entries {
			ev, _ := e.([]any)
			if len(ev) != 2 {
				continue
			}
			m := redis.XMessage{ID: fmt.Sprint(ev[0]), Values: map[string]any{}}
			fields, _ := ev[1].([]any)
			for i := 0; i+1 < len(fields); i += 2 {
				m.Values[fmt.Sprint(fields[i])] = fields[i+1]
			}
			out[idx] = append(out[idx], m)
		}
	}
	return out
}
