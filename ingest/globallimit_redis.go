package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ GlobalLimiter = (*RedisGlobalLimiter)(nil)

// globalBucketMaxIdle caps how long an untouched event bucket stays in
// Redis (absent means full, as for the room buckets).
const globalBucketMaxIdle = time.Hour

// GlobalBucketKey is the key of event's global bucket. The hash tag
// {event:ID} gives each event a slot of its own in a Cluster, apart from
// its rooms': the bucket is touched once per batch, not once per comment,
// so one slot holds it even for the largest event.
func GlobalBucketKey(event string) string {
	return redisx.Prefix + "{event:" + event + "}:global"
}

// RedisGlobalLimiter is the GlobalLimiter shared by every ingest node: one
// hash per event (tokens, ts), refilled and taken in one Lua script timed
// by Redis's TIME, so every node sees one bucket on one clock.
type RedisGlobalLimiter struct {
	rdb redis.UniversalClient
}

// NewRedisGlobalLimiter returns the event buckets kept in rdb.
func NewRedisGlobalLimiter(rdb redis.UniversalClient) *RedisGlobalLimiter {
	return &RedisGlobalLimiter{rdb: rdb}
}

// globalTakeScript is the room bucket's script (state_redis.go) with a
// partial take: it grants what the bucket holds, up to n, so a node asking
// for a batch when fewer tokens are left still gets them. A clock that
// steps back credits no refill.
//
// KEYS[1] bucket hash; ARGV[1] capacity; ARGV[2] tokens per second;
// ARGV[3] n; ARGV[4] longest expiry in ms. Returns the tokens taken.
var globalTakeScript = redis.NewScript(`
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local maxIdle = tonumber(ARGV[4])
` + luaRefill + `local got = math.min(n, math.floor(tokens))
if got < 0 then
	got = 0
end
tokens = tokens - got
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
local ttl = maxIdle
if rate > 0 then
	ttl = math.min(maxIdle, math.ceil((capacity - tokens) * 1000 / rate) + 1)
end
if ttl < 1 then
	ttl = 1
end
redis.call('PEXPIRE', KEYS[1], ttl)
return got
`)

// Take implements GlobalLimiter.
func (l *RedisGlobalLimiter) Take(ctx context.Context, event string, burst, perSec float64, n int) (int, error) {
	if !validGlobalTake(burst, perSec, n) {
		return 0, fmt.Errorf("ingest: global bucket %s: burst %v, rate %v, n %d: must be finite and >= 0", event, burst, perSec, n)
	}
	got, err := globalTakeScript.Run(ctx, l.rdb, []string{GlobalBucketKey(event)},
		burst, perSec, n, globalBucketMaxIdle.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("ingest: global bucket %s: %w", event, err)
	}
	return got, nil
}
