package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
	"danmaku/sdk/wire"
)

var _ TakedownStore = (*RedisTakedownStore)(nil)

// RedisTakedownStore is the TakedownStore shared by every ingest node: one
// hash per room, under the room's hash tag,
//
//	danmaku:{room:ID}:takedowns   hash: field "b/<id>" or "l/<id>" (the message's identity), value the takedown as JSON with its position "n"
//
// Add is one script (a check of the field and of the room's count, then
// HSET), so two nodes taking the same message down record it once, and the
// bound holds across nodes. The hash expires at the latest expiry any Add
// asked for (the room's event's end plus the retention).
type RedisTakedownStore struct {
	rdb redis.UniversalClient
}

// NewRedisTakedownStore returns the takedowns kept in rdb.
func NewRedisTakedownStore(rdb redis.UniversalClient) *RedisTakedownStore {
	return &RedisTakedownStore{rdb: rdb}
}

// TakedownsKey is the key of room's takedowns.
func TakedownsKey(room string) string { return redisx.RoomKey(room, "takedowns") }

// storedTakedown is a takedown as the hash holds it: with its position.
type storedTakedown struct {
	Takedown
	N int `json:"n"`
}

// KEYS hash; ARGV field, json without n (its last byte is '}'), max,
// expire ms. Returns {1, json} when created, {0, json} for the first
// record, {2, ”} when full.
var takedownAddScript = redis.NewScript(`
local j = redis.call('HGET', KEYS[1], ARGV[1])
local exp = tonumber(ARGV[4])
local cur = redis.call('PEXPIRETIME', KEYS[1])
if cur >= 0 and cur < exp then
	redis.call('PEXPIREAT', KEYS[1], exp)
end
if j then
	return {0, j}
end
local n = redis.call('HLEN', KEYS[1])
if n >= tonumber(ARGV[3]) then
	return {2, ''}
end
j = string.sub(ARGV[2], 1, -2) .. ',"n":' .. n .. '}'
redis.call('HSET', KEYS[1], ARGV[1], j)
if cur < 0 then
	redis.call('PEXPIREAT', KEYS[1], exp)
end
return {1, j}`)

// Add implements TakedownStore.
func (r *RedisTakedownStore) Add(ctx context.Context, room string, t Takedown, max int, expire time.Time) (Takedown, bool, error) {
	if err := validTakedown(room, &t); err != nil {
		return Takedown{}, false, err
	}
	fail := func(err error) (Takedown, bool, error) {
		return Takedown{}, false, fmt.Errorf("ingest: add takedown %s/%s: %w", room, t.ID, err)
	}
	j, err := json.Marshal(t)
	if err != nil {
		return fail(err)
	}
	res, err := takedownAddScript.Run(ctx, r.rdb, []string{TakedownsKey(room)}, takedownKey(t.ID, t.Kind), j, max, expire.UnixMilli()).Slice()
	if err != nil {
		return fail(err)
	}
	if len(res) != 2 {
		return fail(errors.New("unexpected script answer"))
	}
	code, _ := res[0].(int64)
	s, _ := res[1].(string)
	if code == 2 {
		return Takedown{}, false, fmt.Errorf("%w: %s", ErrTakedownsFull, room)
	}
	st, err := decodeTakedown(s)
	if err != nil {
		return fail(err)
	}
	return st.Takedown, code == 1, nil
}

func decodeTakedown(s string) (storedTakedown, error) {
	var t storedTakedown
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return storedTakedown{}, fmt.Errorf("corrupt takedown record: %w", err)
	}
	return t, nil
}

// Lookup implements TakedownStore: one round trip.
func (r *RedisTakedownStore) Lookup(ctx context.Context, room, id string, kind wire.Kind) (Takedown, bool, int, error) {
	var get *redis.StringCmd
	var n *redis.IntCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.HGet(ctx, TakedownsKey(room), takedownKey(id, kind))
		n = p.HLen(ctx, TakedownsKey(room))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Takedown{}, false, 0, fmt.Errorf("ingest: look up takedown %s/%s: %w", room, id, err)
	}
	s, gerr := get.Result()
	if errors.Is(gerr, redis.Nil) {
		return Takedown{}, false, int(n.Val()), nil
	}
	st, err := decodeTakedown(s)
	if err != nil {
		return Takedown{}, false, 0, fmt.Errorf("ingest: look up takedown %s/%s: %w", room, id, err)
	}
	return st.Takedown, true, int(n.Val()), nil
}

// List implements TakedownStore: the room's hash (at most
// MaxTakedownsPerRoom fields), ordered by position.
func (r *RedisTakedownStore) List(ctx context.Context, room string) ([]Takedown, error) {
	all, err := r.rdb.HGetAll(ctx, TakedownsKey(room)).Result()
	if err != nil {
		return nil, fmt.Errorf("ingest: list takedowns %s: %w", room, err)
	}
	stored := make([]storedTakedown, 0, len(all))
	for _, s := range all {
		st, err := decodeTakedown(s)
		if err != nil {
			return nil, fmt.Errorf("ingest: list takedowns %s: %w", room, err)
		}
		stored = append(stored, st)
	}
	sort.Slice(stored, func(i, j int) bool { return stored[i].N < stored[j].N })
	out := make([]Takedown, len(stored))
	for i := range stored {
		out[i] = stored[i].Takedown
	}
	return out, nil
}
