package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ Store = (*RedisStore)(nil)

// KeyPrefix starts the key of each kind's documents: a hash
// "danmaku:{rules}:KIND" holding
//
//	head   the number of the version in force (and the last one pushed)
//	m:N    version N's Meta, as JSON, with its size and digest
//	d:N    version N's body
//
// One hash per kind, one hash tag for every kind: a push is one script on
// one key, and a Cluster keeps every kind on one slot (they are small and
// read rarely: a node reads "head" every poll, the body only when it moved).
const KeyPrefix = redisx.Prefix + "{rules}:"

// Key is kind's hash.
func Key(kind string) string { return KeyPrefix + kind }

// RedisStore is the Store shared by the fleet.
type RedisStore struct{ rdb redis.UniversalClient }

// NewRedisStore returns the documents kept in rdb.
func NewRedisStore(rdb redis.UniversalClient) *RedisStore { return &RedisStore{rdb: rdb} }

// KEYS kind's hash; ARGV meta JSON, body, versions kept. Returns the new
// version's number.
var pushScript = redis.NewScript(`
local v = redis.call('HINCRBY', KEYS[1], 'head', 1)
redis.call('HSET', KEYS[1], 'm:' .. v, ARGV[1], 'd:' .. v, ARGV[2])
local old = v - tonumber(ARGV[3])
if old > 0 then
	redis.call('HDEL', KEYS[1], 'm:' .. old, 'd:' .. old)
end
return v`)

// Push implements Store.
func (s *RedisStore) Push(ctx context.Context, kind string, body []byte, m Meta) (Version, error) {
	if err := checkKind(kind); err != nil {
		return Version{}, err
	}
	// The number is the script's; the rest is known before.
	v := describe(0, body, m)
	js, err := json.Marshal(v)
	if err != nil {
		return Version{}, err
	}
	n, err := pushScript.Run(ctx, s.rdb, []string{Key(kind)}, js, body, KeepVersions).Int64()
	if err != nil {
		return Version{}, fmt.Errorf("rules: push %s: %w", kind, err)
	}
	v.Version = n
	return v, nil
}

// Head implements Store.
func (s *RedisStore) Head(ctx context.Context, kind string) (int64, error) {
	if err := checkKind(kind); err != nil {
		return 0, err
	}
	n, err := s.rdb.HGet(ctx, Key(kind), "head").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("rules: %s head: %w", kind, err)
	}
	return n, nil
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, kind string, version int64) (Document, error) {
	if version == 0 {
		head, err := s.Head(ctx, kind)
		if err != nil {
			return Document{}, err
		}
		version = head
	}
	if err := checkKind(kind); err != nil {
		return Document{}, err
	}
	n := strconv.FormatInt(version, 10)
	res, err := s.rdb.HMGet(ctx, Key(kind), "m:"+n, "d:"+n).Result()
	if err != nil {
		return Document{}, fmt.Errorf("rules: %s version %d: %w", kind, version, err)
	}
	meta, ok1 := res[0].(string)
	body, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return Document{}, fmt.Errorf("%w: %s version %d", ErrNoVersion, kind, version)
	}
	v, err := decodeVersion(meta, version)
	if err != nil {
		return Document{}, err
	}
	return Document{Version: v, Body: []byte(body)}, nil
}

// History implements Store.
func (s *RedisStore) History(ctx context.Context, kind string, n int) ([]Version, error) {
	head, err := s.Head(ctx, kind)
	if err != nil || head == 0 || n <= 0 {
		return nil, err
	}
	n = min(n, KeepVersions, int(head))
	fields := make([]string, n)
	for i := range fields {
		fields[i] = "m:" + strconv.FormatInt(head-int64(i), 10)
	}
	res, err := s.rdb.HMGet(ctx, Key(kind), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("rules: %s history: %w", kind, err)
	}
	out := make([]Version, 0, n)
	for i, r := range res {
		meta, ok := r.(string)
		if !ok {
			continue // trimmed meanwhile
		}
		v, err := decodeVersion(meta, head-int64(i))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func decodeVersion(meta string, n int64) (Version, error) {
	var v Version
	if err := json.Unmarshal([]byte(meta), &v); err != nil {
		return Version{}, fmt.Errorf("rules: bad version record %d: %w", n, err)
	}
	v.Version = n
	return v, nil
}
