package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
)

var _ LotteryStore = (*RedisLotteryStore)(nil)

// Keys of the running-lotteries index. The hash tag {lotteries} puts the
// three in one Cluster slot, so every index write is one script.
const (
	// LotteriesRunningKey is a hash: field "ROOM/ID", value the lottery as
	// JSON, for every lottery started and not stopped.
	LotteriesRunningKey = redisx.Prefix + "{lotteries}:running"
	// LotteriesUntilKey is a sorted set of the same fields by their end in
	// ms, so that a Start drops what ended long ago and was never stopped.
	LotteriesUntilKey = redisx.Prefix + "{lotteries}:until"
	// LotteriesVersionKey is incremented by every Start and Stop: nodes
	// poll it every second.
	LotteriesVersionKey = redisx.Prefix + "{lotteries}:version"
)

// lotteryIndexGrace is how long an ended lottery that nobody stopped stays
// in the index: nodes judge Until themselves, so it is only dead weight.
const lotteryIndexGrace = time.Hour

// RedisLotteryStore is the LotteryStore shared by every ingest node. A
// lottery's record and its entrants sit under its room's hash tag, so
// entering is one script on the room's shard and busy lotteries of many
// rooms spread over the cluster:
//
//	danmaku:{room:ID}:lottery:LOT            hash: j (JSON), until (ms), stopped (0|1), exp (ms)
//	danmaku:{room:ID}:lottery:LOT:entrants   set of user ids
//
// Both expire exp, the retention after the lottery's end. The index of
// running lotteries ({lotteries} keys above) is what nodes poll; it lives
// in another slot, so Start and Stop write the record first and the index
// second, and are safe to send again when the second step failed.
//
// Enter is SADD behind a check of the record, timed by Redis's TIME, so an
// entry after Stop or Until is refused whatever a node's snapshot says,
// and a user is recorded once across nodes. Lottery ids cannot hold ':',
// so no id's keys collide with another's.
type RedisLotteryStore struct {
	rdb       redis.UniversalClient
	clock     clock.Clock
	retention time.Duration
}

// NewRedisLotteryStore returns the lotteries kept in rdb. c (nil: real
// clock) checks that a lottery starts with its end ahead and ages the
// index; entries are timed by Redis's clock.
func NewRedisLotteryStore(rdb redis.UniversalClient, c clock.Clock) *RedisLotteryStore {
	return &RedisLotteryStore{rdb: rdb, clock: clock.Or(c), retention: defaultLotteryRetention}
}

func lotteryKey(room, id string) string    { return redisx.RoomKey(room, "lottery:"+id) }
func lotterySetKey(room, id string) string { return redisx.RoomKey(room, "lottery:"+id+":entrants") }
func lotteryField(room, id string) string  { return room + "/" + id }
func lotteryIndexKeys() []string {
	return []string{LotteriesRunningKey, LotteriesUntilKey, LotteriesVersionKey}
}
func (r *RedisLotteryStore) expireAt(l *Lottery) int64 { return l.Until.Add(r.retention).UnixMilli() }

// KEYS record; ARGV json, until ms, exp ms. Returns false when created,
// else the existing record's JSON.
var lotteryCreateScript = redis.NewScript(`
local j = redis.call('HGET', KEYS[1], 'j')
if j then
	return j
end
redis.call('HSET', KEYS[1], 'j', ARGV[1], 'until', ARGV[2], 'stopped', '0', 'exp', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return false`)

// KEYS running, until, version; ARGV field, json, until ms, drop-before ms.
var lotteryIndexScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
for _, f in ipairs(old) do
	redis.call('HDEL', KEYS[1], f)
	redis.call('ZREM', KEYS[2], f)
end
return redis.call('INCR', KEYS[3])`)

// KEYS record; ARGV json of the stopped lottery. Returns the record's
// JSON after the call (the earlier stop's, if it was stopped), or false.
var lotteryStopScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'j', 'stopped')
if not v[1] then
	return false
end
if v[2] == '1' then
	return v[1]
end
redis.call('HSET', KEYS[1], 'j', ARGV[1], 'stopped', '1')
return ARGV[1]`)

// KEYS running, until, version; ARGV field.
var lotteryUnindexScript = redis.NewScript(`
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('INCR', KEYS[3])`)

// KEYS record, entrants; ARGV user. Returns 1 (first), 0 (repeat), -1 (no
// lottery), -2 (closed).
var lotteryEnterScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'until', 'stopped', 'exp')
if not v[1] then
	return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if v[2] == '1' or now >= tonumber(v[1]) then
	return -2
end
local n = redis.call('SADD', KEYS[2], ARGV[1])
if n == 1 and redis.call('SCARD', KEYS[2]) == 1 then
	redis.call('PEXPIREAT', KEYS[2], v[3])
end
return n`)

// KEYS running, version. One atomic read of both.
var lotteryRunningScript = redis.NewScript(`
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}`)

// Start implements LotteryStore.
func (r *RedisLotteryStore) Start(ctx context.Context, l Lottery) (Lottery, error) {
	now := r.clock.Now()
	if l.StartedAt.IsZero() {
		l.StartedAt = now
	}
	if err := l.Validate(now); err != nil {
		return Lottery{}, err
	}
	fail := func(err error) (Lottery, error) {
		return Lottery{}, fmt.Errorf("ingest: start lottery %s/%s: %w", l.Room, l.ID, err)
	}
	j, err := json.Marshal(l)
	if err != nil {
		return fail(err)
	}
	res, err := lotteryCreateScript.Run(ctx, r.rdb, []string{lotteryKey(l.Room, l.ID)}, j, l.Until.UnixMilli(), r.expireAt(&l)).Text()
	switch {
	case errors.Is(err, redis.Nil):
		// Created.
	case err != nil:
		return fail(err)
	default:
		old, derr := decodeLottery(res)
		if derr != nil {
			return fail(derr)
		}
		if !old.sameStart(&l) {
			return Lottery{}, fmt.Errorf("%w: %s/%s", ErrLotteryExists, l.Room, l.ID)
		}
		// Started again: make sure the index has it, as first started.
		l, j = old, []byte(res)
	}
	dropBefore := now.Add(-lotteryIndexGrace).UnixMilli()
	if err := lotteryIndexScript.Run(ctx, r.rdb, lotteryIndexKeys(), lotteryField(l.Room, l.ID), j, l.Until.UnixMilli(), dropBefore).Err(); err != nil {
		return fail(fmt.Errorf("recorded, not yet indexed (start it again): %w", err))
	}
	return l, nil
}

func decodeLottery(s string) (Lottery, error) {
	var l Lottery
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return Lottery{}, fmt.Errorf("corrupt lottery record: %w", err)
	}
	return l, nil
}

// Stop implements LotteryStore.
func (r *RedisLotteryStore) Stop(ctx context.Context, room, id string, at time.Time) (Lottery, error) {
	l, err := r.Get(ctx, room, id)
	if err != nil {
		return Lottery{}, err
	}
	fail := func(err error) (Lottery, error) {
		return Lottery{}, fmt.Errorf("ingest: stop lottery %s/%s: %w", room, id, err)
	}
	if l.StoppedAt.IsZero() {
		l.StoppedAt = at
		j, err := json.Marshal(l)
		if err != nil {
			return fail(err)
		}
		s, err := lotteryStopScript.Run(ctx, r.rdb, []string{lotteryKey(room, id)}, j).Text()
		if errors.Is(err, redis.Nil) {
			return Lottery{}, fmt.Errorf("%w: %s/%s", ErrNoLottery, room, id)
		}
		if err != nil {
			return fail(err)
		}
		if l, err = decodeLottery(s); err != nil {
			return fail(err)
		}
	}
	// Also for a lottery stopped before: the index step may have failed.
	if err := lotteryUnindexScript.Run(ctx, r.rdb, lotteryIndexKeys(), lotteryField(room, id)).Err(); err != nil {
		return fail(fmt.Errorf("stopped, still indexed (stop it again): %w", err))
	}
	return l, nil
}

// Get implements LotteryStore.
func (r *RedisLotteryStore) Get(ctx context.Context, room, id string) (Lottery, error) {
	if err := checkLotteryRef(room, id); err != nil {
		return Lottery{}, err
	}
	s, err := r.rdb.HGet(ctx, lotteryKey(room, id), "j").Result()
	if errors.Is(err, redis.Nil) {
		return Lottery{}, fmt.Errorf("%w: %s/%s", ErrNoLottery, room, id)
	}
	if err != nil {
		return Lottery{}, fmt.Errorf("ingest: get lottery %s/%s: %w", room, id, err)
	}
	l, err := decodeLottery(s)
	if err != nil {
		return Lottery{}, fmt.Errorf("ingest: get lottery %s/%s: %w", room, id, err)
	}
	return l, nil
}

// Enter implements LotteryStore.
func (r *RedisLotteryStore) Enter(ctx context.Context, room, id, user string) (bool, error) {
	if err := checkLotteryRef(room, id); err != nil {
		return false, err
	}
	if err := checkEntrant(user); err != nil {
		return false, err
	}
	n, err := lotteryEnterScript.Run(ctx, r.rdb, []string{lotteryKey(room, id), lotterySetKey(room, id)}, user).Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("ingest: enter lottery %s/%s: %w", room, id, err)
	case n == -1:
		return false, fmt.Errorf("%w: %s/%s", ErrNoLottery, room, id)
	case n == -2:
		return false, fmt.Errorf("%w: %s/%s", ErrLotteryClosed, room, id)
	}
	return n == 1, nil
}

// Count implements LotteryStore.
func (r *RedisLotteryStore) Count(ctx context.Context, room, id string) (int64, error) {
	if err := checkLotteryRef(room, id); err != nil {
		return 0, err
	}
	n, err := r.rdb.SCard(ctx, lotterySetKey(room, id)).Result()
	if err != nil {
		return 0, fmt.Errorf("ingest: count lottery %s/%s: %w", room, id, err)
	}
	return n, nil
}

// Entrants implements LotteryStore.
func (r *RedisLotteryStore) Entrants(ctx context.Context, room, id string, cursor uint64, count int) ([]string, uint64, error) {
	if err := checkLotteryRef(room, id); err != nil {
		return nil, 0, err
	}
	if count < 1 || count > maxEntrantsPage {
		return nil, 0, fmt.Errorf("%w: count %d: 1-%d", ErrBadLottery, count, maxEntrantsPage)
	}
	users, next, err := r.rdb.SScan(ctx, lotterySetKey(room, id), cursor, "", int64(count)).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("ingest: list lottery %s/%s: %w", room, id, err)
	}
	return users, next, nil
}

// Running implements LotteryStore.
func (r *RedisLotteryStore) Running(ctx context.Context) ([]Lottery, int64, error) {
	res, err := lotteryRunningScript.Run(ctx, r.rdb, []string{LotteriesRunningKey, LotteriesVersionKey}).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("ingest: running lotteries: %w", err)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("ingest: running lotteries: unexpected answer %v", res)
	}
	vs, _ := res[0].(string)
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("ingest: running lotteries: version %q: %w", vs, err)
	}
	kv, _ := res[1].([]any)
	out := make([]Lottery, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		f, _ := kv[i].(string)
		s, _ := kv[i+1].(string)
		l, err := decodeLottery(s)
		if err != nil || lotteryField(l.Room, l.ID) != f || !strings.Contains(f, "/") {
			// One bad record must not hide the others from every node.
			continue
		}
		out = append(out, l)
	}
	sortLotteries(out)
	return out, v, nil
}

// Version implements LotteryStore.
func (r *RedisLotteryStore) Version(ctx context.Context) (int64, error) {
	v, err := r.rdb.Get(ctx, LotteriesVersionKey).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ingest: lottery version: %w", err)
	}
	return v, nil
}
