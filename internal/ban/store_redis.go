package ban

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ Store = (*RedisStore)(nil)

// Keys of the bans. The hash tag {bans} puts the three in one Cluster slot,
// so that every write changes them together in one script.
const (
	// Key is a hash: field "USER/SCOPE" (Ban.Scope: "USER/ROOM",
	// "USER/@EVENT", "USER/" for every room; a scope never holds '/', so
	// the last '/' splits), value the ban as JSON.
	Key = redisx.Prefix + "{bans}:all"
	// VersionKey is incremented by every write: readers poll it.
	VersionKey = redisx.Prefix + "{bans}:version"
	// ExpiryKey is a sorted set of the fields of lapsing bans, scored by
	// their end in ms, for Purge.
	ExpiryKey = redisx.Prefix + "{bans}:expiry"
)

// RedisStore is the Store shared by every node. The bans of an event
// are few (thousands) and change by operator action, so one hash holds
// them all; nodes poll the version key every second and read the hash only
// after it moved.
type RedisStore struct{ rdb redis.UniversalClient }

// NewRedisStore returns the bans kept in rdb.
func NewRedisStore(rdb redis.UniversalClient) *RedisStore { return &RedisStore{rdb: rdb} }

func banField(user, room string) string { return user + "/" + room }

// KEYS bans, version, expiry; ARGV field, json, until ms (0: never).
var banPutScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then
	redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
else
	redis.call('ZREM', KEYS[3], ARGV[1])
end
return redis.call('INCR', KEYS[2])`)

// KEYS bans, version, expiry; ARGV field.
var banDeleteScript = redis.NewScript(`
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
	redis.call('INCR', KEYS[2])
	return 1
end
return 0`)

// KEYS bans, version, expiry; ARGV now ms. Deletes what lapsed at or
// before now; a ban renewed since has a later score and stays.
var banPurgeScript = redis.NewScript(`
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
for _, f in ipairs(lapsed) do
	redis.call('HDEL', KEYS[1], f)
	redis.call('ZREM', KEYS[3], f)
end
if #lapsed > 0 then
	redis.call('INCR', KEYS[2])
end
return #lapsed`)

// KEYS bans, version. One atomic read of both.
var banListScript = redis.NewScript(`
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}`)

func banKeys() []string { return []string{Key, VersionKey, ExpiryKey} }

// Put implements Store.
func (r *RedisStore) Put(ctx context.Context, b Ban) error {
	if err := b.Validate(); err != nil {
		return err
	}
	js, err := json.Marshal(b)
	if err != nil {
		return err
	}
	var until int64
	if !b.Until.IsZero() {
		until = max(b.Until.UnixMilli(), 1)
	}
	if err := banPutScript.Run(ctx, r.rdb, banKeys(), banField(b.User, b.Scope()), js, until).Err(); err != nil {
		return fmt.Errorf("ban: ban %s: %w", b.User, err)
	}
	return nil
}

// Delete implements Store.
func (r *RedisStore) Delete(ctx context.Context, user, room string) error {
	if err := banDeleteScript.Run(ctx, r.rdb, banKeys(), banField(user, room)).Err(); err != nil {
		return fmt.Errorf("ban: lift ban %s: %w", user, err)
	}
	return nil
}

// globEscape quotes the characters HSCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// User implements Store.
func (r *RedisStore) User(ctx context.Context, user string) ([]Ban, error) {
	var out []Ban
	var cursor uint64
	for {
		kv, next, err := r.rdb.HScan(ctx, Key, cursor, globEscape(user)+"/*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("ban: bans of %s: %w", user, err)
		}
		for i := 1; i < len(kv); i += 2 {
			b, err := decodeBan(kv[i])
			if err != nil {
				return nil, err
			}
			// "a/*" also matches the bans of a user called "a/b".
			if b.User == user {
				out = append(out, b)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	sortBans(out)
	// HSCAN may return a field twice; keep one of each.
	dedup := out[:0]
	for i, b := range out {
		if i == 0 || b.Scope() != out[i-1].Scope() {
			dedup = append(dedup, b)
		}
	}
	return dedup, nil
}

// Version implements Store.
func (r *RedisStore) Version(ctx context.Context) (int64, error) {
	v, err := r.rdb.Get(ctx, VersionKey).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ban: bans version: %w", err)
	}
	return v, nil
}

// List implements Store.
func (r *RedisStore) List(ctx context.Context) ([]Ban, int64, error) {
	// Read-only (EVALSHA_RO): the edge and the gslb may read the bans but
	// not write them, and Redis checks a plain EVAL's keys as writes.
	res, err := banListScript.RunRO(ctx, r.rdb, []string{Key, VersionKey}).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("ban: list bans: %w", err)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("ban: list bans: unexpected reply %v", res)
	}
	vs, _ := res[0].(string)
	version, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("ban: list bans: version %q: %w", vs, err)
	}
	kv, _ := res[1].([]any)
	out := make([]Ban, 0, len(kv)/2)
	for i := 1; i < len(kv); i += 2 {
		s, _ := kv[i].(string)
		b, err := decodeBan(s)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, b)
	}
	sortBans(out)
	return out, version, nil
}

// Purge implements Store.
func (r *RedisStore) Purge(ctx context.Context, now time.Time) (int, error) {
	n, err := banPurgeScript.Run(ctx, r.rdb, banKeys(), now.UnixMilli()).Int()
	if err != nil {
		return 0, fmt.Errorf("ban: purge bans: %w", err)
	}
	return n, nil
}

func decodeBan(s string) (Ban, error) {
	var b Ban
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		return Ban{}, fmt.Errorf("ban: bad ban record: %w", err)
	}
	return b, nil
}
