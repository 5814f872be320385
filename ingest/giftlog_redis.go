package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
	"danmaku/internal/wire"
)

var _ GiftLog = (*RedisGiftLog)(nil)

// defaultGiftRegisterEvery is how often a RedisGiftLog re-registers a room
// it appends to, as the stream store's RegisterEvery default.
const defaultGiftRegisterEvery = time.Minute

// RedisGiftLogConfig configures a RedisGiftLog.
type RedisGiftLogConfig struct {
	// Client talks to the Redis that holds Streams. Required. The gift log
	// never closes it.
	Client redis.UniversalClient
	// Streams is the Redis stream store the slicer and edge read: the gift
	// log writes its Live lanes, with its key layout and entry encoding,
	// and registers rooms through it. Required.
	Streams *stream.RedisStore
	// OrderTTL is how long an order id stays deduplicated. Zero: 24 h.
	OrderTTL time.Duration
	// RegisterEvery is how often this process re-registers a room it
	// appends gifts to (Streams.OpenRoom, which keeps a recorded open
	// time), so that a registry lost with a Redis restart is rebuilt.
	// Zero: 1 minute.
	RegisterEvery time.Duration
	// Clock times RegisterEvery and nothing else: entry ids and the order
	// TTL run on Redis's clock. Nil: the real clock.
	Clock clock.Clock
	// Logger receives registration warnings. Nil: slog.Default().
	Logger *slog.Logger
}

// RedisGiftLog is the GiftLog shared by every ingest node. One Lua script
// looks the order up and, if it is new, appends the gift and records the
// order, so the three are one atomic step in Redis; a retried script — by
// go-redis, or by the business server after an ambiguous error — finds the
// order and appends nothing.
//
// A room's order records sit beside its streams, under its hash tag:
//
//	danmaku:{room:ID}:live          the room's Live lane (stream.RedisStore's key)
//	danmaku:{room:ID}:order:ORDER   the entry id of ORDER, expiring after OrderTTL
//
// so the script's two keys share a Redis Cluster slot. The rooms registry
// lives in another slot; a room is registered (Streams.OpenRoom) after its
// first gift in each RegisterEvery of this process, as the stream store does
// after its own appends.
//
// RedisGiftLog is safe for concurrent use. It starts no goroutines.
type RedisGiftLog struct {
	client        redis.UniversalClient
	streams       *stream.RedisStore
	ttlMs         int64
	registerEvery time.Duration
	clock         clock.Clock
	log           *slog.Logger

	registered sync.Map // room → time.Time (clock) of this process's last registration
}

// NewRedisGiftLog checks cfg, applies its defaults and returns the gift log.
// It sends nothing to Redis.
func NewRedisGiftLog(cfg RedisGiftLogConfig) (*RedisGiftLog, error) {
	if cfg.Client == nil || cfg.Streams == nil {
		return nil, errors.New("ingest: redis gift log: Client and Streams are required")
	}
	if cfg.OrderTTL == 0 {
		cfg.OrderTTL = defaultOrderTTL
	}
	px, err := redisx.PX(cfg.OrderTTL)
	if err != nil {
		return nil, fmt.Errorf("ingest: redis gift log: OrderTTL: %w", err)
	}
	if cfg.RegisterEvery < 0 {
		return nil, fmt.Errorf("ingest: redis gift log: RegisterEvery %v is negative", cfg.RegisterEvery)
	}
	if cfg.RegisterEvery == 0 {
		cfg.RegisterEvery = defaultGiftRegisterEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RedisGiftLog{
		client:        cfg.Client,
		streams:       cfg.Streams,
		ttlMs:         px,
		registerEvery: cfg.RegisterEvery,
		clock:         clock.Or(cfg.Clock),
		log:           cfg.Logger,
	}, nil
}

// orderKey returns the key of room's record of orderID. The order id comes
// after the room's hash tag, so whatever it holds ('{', '}', ':') it cannot
// move the key to another slot or collide with another room's.
func orderKey(room, orderID string) string {
	return redisx.RoomKey(room, "order:"+orderID)
}

// appendGiftScript appends a gift once per order.
//
// KEYS[1] the room's Live stream; KEYS[2] the room's order key. ARGV[1] the
// msgpack message (entry field "m"); ARGV[2] the order id (entry field "o");
// ARGV[3] the order TTL in ms. Returns {entry id, 1} for an order already
// appended, {entry id, 0} for one appended now.
//
// An empty record is not an entry id: it is a reservation left by the
// Reserve/Commit order book this replaced (a rolling upgrade), treated as
// absent rather than answered as a duplicate with no id.
var appendGiftScript = redis.NewScript(`
local id = redis.call('GET', KEYS[2])
if id and id ~= '' then
	return {id, 1}
end
id = redis.call('XADD', KEYS[1], '*', 'm', ARGV[1], 'o', ARGV[2])
redis.call('SET', KEYS[2], id, 'PX', ARGV[3])
return {id, 0}
`)

// AppendGift implements GiftLog.
func (l *RedisGiftLog) AppendGift(ctx context.Context, room, orderID string, m wire.Message) (string, bool, error) {
	if err := checkGift(room, orderID); err != nil {
		return "", false, err
	}
	fail := func(err error) (string, bool, error) {
		return "", false, fmt.Errorf("ingest: append gift %s/%s: %w", room, orderID, err)
	}
	b, err := encodeEntry(m)
	if err != nil {
		return fail(err)
	}
	keys := []string{l.streams.StreamKey(stream.Key{Room: room, Lane: stream.Live}), orderKey(room, orderID)}
	res, err := appendGiftScript.Run(ctx, l.client, keys, b, orderID, l.ttlMs).Slice()
	if err != nil {
		return fail(err)
	}
	id, dup, err := parseAppendGift(res)
	if err != nil {
		return fail(err)
	}
	l.register(ctx, room)
	return id, dup, nil
}

// encodeEntry encodes m as stream.RedisStore stores it in an entry's "m"
// field, so that its readers decode gifts like any other entry: msgpack with
// compact ints, without the id (the entry id replaces it) and without the
// order (wire.Message leaves it out; it goes in field "o").
func encodeEntry(m wire.Message) ([]byte, error) {
	m.ID = ""
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(&m); err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	return buf.Bytes(), nil
}

func parseAppendGift(res []any) (id string, dup bool, err error) {
	if len(res) == 2 {
		id, ok1 := res[0].(string)
		flag, ok2 := res[1].(int64)
		if ok1 && ok2 && id != "" {
			return id, flag == 1, nil
		}
	}
	return "", false, fmt.Errorf("unexpected script answer %v", res)
}

// register opens room in the registry once per registerEvery. The gift is
// stored by then: a failure is logged and retried by the room's next gift,
// never returned (the caller would retry a stored gift for nothing).
func (l *RedisGiftLog) register(ctx context.Context, room string) {
	now := l.clock.Now()
	if v, ok := l.registered.Load(room); ok && now.Sub(v.(time.Time)) < l.registerEvery {
		return
	}
	if err := l.streams.OpenRoom(ctx, room); err != nil {
		l.log.Warn("ingest: register gift room", "room", room, "err", err)
		return
	}
	l.registered.Store(room, now)
}
