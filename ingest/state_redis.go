package ingest

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ RoomLimiter = (*RedisRoomLimiter)(nil)

// roomBucketMaxIdle caps how long an untouched room bucket stays in Redis.
// A bucket is forgotten once it would be full again (absent means full), so
// this only matters for rates so low that refilling takes longer; forgetting
// such a bucket after an hour lets at most one capacity more through.
const roomBucketMaxIdle = time.Hour

// RedisRoomLimiter is the RoomLimiter shared by every ingest node: one hash
// per room, danmaku:{room:ID}:bucket, with fields tokens and ts (the last
// refill, µs since the epoch by Redis's clock). Refill and take run in one
// Lua script timed by redis.call('TIME'), so every ingest node sees one
// bucket on one clock, whatever its own clock says.
type RedisRoomLimiter struct {
	rdb redis.UniversalClient
}

// NewRedisRoomLimiter returns the room buckets kept in rdb.
func NewRedisRoomLimiter(rdb redis.UniversalClient) *RedisRoomLimiter {
	return &RedisRoomLimiter{rdb: rdb}
}

// takeScript refills the bucket for the time since its last refill (up to
// capacity), takes n tokens if they are there, and sets the key to expire
// when the bucket would be full again, so idle rooms vanish. A bucket that
// does not exist is full.
//
// Redis's clock is wall time and may step back (NTP, a failover to a replica
// on another machine). Then no refill is credited and the new time is kept:
// the bucket neither refills for time that did not pass nor stalls until the
// clock catches up; what is counted twice is bounded by capacity.
//
// KEYS[1] bucket hash; ARGV[1] capacity; ARGV[2] tokens per second;
// ARGV[3] n; ARGV[4] longest expiry in ms. Returns 1 if n tokens were taken.
// Numbers are doubles in Redis's Lua; µs since the epoch stay exact (< 2^53).
var takeScript = redis.NewScript(`
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local maxIdle = tonumber(ARGV[4])
local t = redis.call('TIME')
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
local ok = 0
if tokens >= n then
	tokens = tokens - n
	ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
local ttl = maxIdle
if rate > 0 then
	ttl = math.min(maxIdle, math.ceil((capacity - tokens) * 1000 / rate) + 1)
end
if ttl < 1 then
	ttl = 1
end
redis.call('PEXPIRE', KEYS[1], ttl)
return ok
`)

// Take implements RoomLimiter.
func (l *RedisRoomLimiter) Take(ctx context.Context, room string, capacity, perSec float64, n int) (bool, error) {
	if !finite(capacity) || !finite(perSec) || capacity < 0 || perSec < 0 {
		return false, fmt.Errorf("ingest: room bucket %s: capacity %v, rate %v: must be finite and >= 0", room, capacity, perSec)
	}
	ok, err := takeScript.Run(ctx, l.rdb, []string{redisx.RoomKey(room, "bucket")},
		capacity, perSec, n, roomBucketMaxIdle.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("ingest: room bucket %s: %w", room, err)
	}
	return ok == 1, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
