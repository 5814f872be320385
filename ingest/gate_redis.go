package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
)

var _ RoomGate = (*RedisRoomGate)(nil)

// roomBucketMaxIdle caps how long an untouched room bucket stays in Redis.
// A bucket is forgotten once it would be full again (absent means full), so
// this only matters for rates so low that refilling takes longer; forgetting
// such a bucket after an hour lets at most one capacity more through.
const roomBucketMaxIdle = time.Hour

// RedisRoomGateConfig configures a RedisRoomGate.
type RedisRoomGateConfig struct {
	// Client talks to the Redis that holds Streams. Required; never closed
	// by the gate.
	Client redis.UniversalClient
	// Streams is the stream store the slicer reads: the gate writes its
	// Barrage lanes with its key layout and entry encoding, and registers
	// rooms through it. Required.
	Streams *stream.RedisStore
	// BatchTTL is how long a stored batch is remembered. Zero: 10 minutes.
	BatchTTL time.Duration
	// Clock times room registration and nothing else: the bucket runs on
	// Redis's clock. Nil: the real clock.
	Clock clock.Clock
	// Logger receives registration warnings. Nil: slog.Default().
	Logger *slog.Logger
}

// RedisRoomGate is the RoomGate shared by every ingest node. One Lua script
// refills and takes from the room's bucket, appends what it admits and
// records the batch, so the four are one atomic step and one round trip;
// a script sent again (by go-redis after a broken connection, or by the
// node after an error) finds the batch record and appends nothing.
//
// A room's gate keys sit beside its streams, under its hash tag, so the
// script's keys share a Redis Cluster slot:
//
//	danmaku:{room:ID}:barrage        the room's Barrage lane (stream.RedisStore's key)
//	danmaku:{room:ID}:bucket         hash: tokens, ts (µs by Redis's TIME)
//	danmaku:{room:ID}:batch:BATCH    how many undecided messages BATCH appended
//
// The bucket is timed by redis.call('TIME'), so every ingest node sees one
// bucket on one clock whatever its own clock says. Redis's clock is wall
// time and may step back (NTP, a failover to a replica on another machine):
// then no refill is credited and the new time is kept, so the bucket
// neither refills for time that did not pass nor stalls until the clock
// catches up. A bucket that does not exist is full; a bucket's key expires
// when it would be full again, so idle rooms cost no memory.
type RedisRoomGate struct {
	client   redis.UniversalClient
	streams  *stream.RedisStore
	batchTTL int64 // ms
	rooms    registrar
}

// NewRedisRoomGate checks cfg and returns the gate. It sends nothing to
// Redis.
func NewRedisRoomGate(cfg RedisRoomGateConfig) (*RedisRoomGate, error) {
	if cfg.Client == nil || cfg.Streams == nil {
		return nil, errors.New("ingest: redis room gate: Client and Streams are required")
	}
	if cfg.BatchTTL == 0 {
		cfg.BatchTTL = defaultBatchTTL
	}
	px, err := redisx.PX(cfg.BatchTTL)
	if err != nil {
		return nil, fmt.Errorf("ingest: redis room gate: BatchTTL: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RedisRoomGate{
		client: cfg.Client, streams: cfg.Streams, batchTTL: px,
		rooms: registrar{streams: cfg.Streams, every: defaultGiftRegisterEvery, clock: clock.Or(cfg.Clock), log: cfg.Logger},
	}, nil
}

// luaRefill is the token bucket both scripts keep in the hash KEYS[1]
// (fields tokens and ts, µs by Redis's clock): with capacity and rate
// (per second) in scope, it leaves now and tokens, refilled and capped.
const luaRefill = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(v[1])
local last = tonumber(v[2])
if tokens == nil or last == nil then
	tokens = capacity
elseif now > last then
	tokens = tokens + (now - last) * rate / 1000000
end
if tokens > capacity then
	tokens = capacity
end
`

// flushScript is the gate's one step.
//
// KEYS[1] the bucket; KEYS[2] the Barrage stream; KEYS[3] the batch record.
// ARGV[1] capacity; ARGV[2] tokens per second; ARGV[3] the bucket's longest
// expiry (ms); ARGV[4] the batch record's TTL (ms); ARGV[5] how many of the
// entries are admitted; ARGV[6...] the entries (field "m" of each). Returns
// {granted, 0}, or {granted, 1} for a batch stored before.
//
// Numbers are doubles in Redis's Lua; µs since the epoch stay exact (< 2^53).
var flushScript = redis.NewScript(`
local done = redis.call('GET', KEYS[3])
if done then
	return {tonumber(done), 1}
end
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local maxIdle = tonumber(ARGV[3])
local admitted = tonumber(ARGV[5])
local undecided = #ARGV - 5 - admitted
` + luaRefill + `tokens = math.max(0, tokens - admitted)
local granted = math.max(0, math.min(undecided, math.floor(tokens)))
tokens = tokens - granted
for i = 6, 5 + admitted + granted do
	redis.call('XADD', KEYS[2], '*', 'm', ARGV[i])
end
redis.call('SET', KEYS[3], granted, 'PX', ARGV[4])
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
local ttl = maxIdle
if rate > 0 then
	ttl = math.min(maxIdle, math.ceil((capacity - tokens) * 1000 / rate) + 1)
end
redis.call('PEXPIRE', KEYS[1], math.max(1, ttl))
return {granted, 0}
`)

// Flush implements RoomGate.
func (g *RedisRoomGate) Flush(ctx context.Context, room string, b Batch) (FlushResult, error) {
	if err := checkBatch(room, b); err != nil {
		return FlushResult{}, err
	}
	fail := func(err error) (FlushResult, error) {
		return FlushResult{}, fmt.Errorf("ingest: flush %s batch %s: %w", room, b.ID, err)
	}
	args := make([]any, 0, 5+len(b.Msgs))
	args = append(args, b.Capacity, b.PerSec, roomBucketMaxIdle.Milliseconds(), g.batchTTL, b.Admitted)
	for i := range b.Msgs {
		e, err := encodeEntry(b.Msgs[i])
		if err != nil {
			return fail(err)
		}
		args = append(args, e)
	}
	keys := []string{
		redisx.RoomKey(room, "bucket"),
		g.streams.StreamKey(stream.Key{Room: room, Lane: stream.Barrage}),
		redisx.RoomKey(room, "batch:"+b.ID),
	}
	res, err := flushScript.Run(ctx, g.client, keys, args...).Int64Slice()
	if err != nil {
		return fail(err)
	}
	if len(res) != 2 || res[0] < 0 || res[0] > int64(len(b.Msgs)-b.Admitted) {
		return fail(fmt.Errorf("unexpected script answer %v", res))
	}
	g.rooms.register(ctx, room)
	return FlushResult{Granted: int(res[0]), Replayed: res[1] == 1}, nil
}
