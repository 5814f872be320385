package roomconf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

// RedisStore keeps each room's settings as JSON in danmaku:{room:ID}:conf,
// beside the room's other keys (same hash tag, same Cluster shard).
type RedisStore struct{ rdb redis.UniversalClient }

// NewRedisStore returns a Store on rdb.
func NewRedisStore(rdb redis.UniversalClient) *RedisStore { return &RedisStore{rdb: rdb} }

func confKey(room string) string { return redisx.RoomKey(room, "conf") }

// Get implements Store.
func (r *RedisStore) Get(ctx context.Context, room string) (Settings, error) {
	b, err := r.rdb.Get(ctx, confKey(room)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Settings{}, nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("roomconf: get %s: %w", room, err)
	}
	var s Settings
	if err := json.Unmarshal(b, &s); err != nil {
		return Settings{}, fmt.Errorf("%w: room %s in Redis: %v", ErrInvalid, room, err)
	}
	return s, nil
}

// Put implements Store.
func (r *RedisStore) Put(ctx context.Context, room string, s Settings) error {
	if err := s.Check(); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := r.rdb.Set(ctx, confKey(room), b, 0).Err(); err != nil {
		return fmt.Errorf("roomconf: put %s: %w", room, err)
	}
	return nil
}
