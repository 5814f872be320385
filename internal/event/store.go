package event

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

// Store errors.
var (
	// ErrExists is returned by Create for an id already taken.
	ErrExists = errors.New("event: exists")
	// ErrNotFound is returned for an unknown event id.
	ErrNotFound = errors.New("event: not found")
)

// Store keeps the events. Writes replace whole events: an event is small
// and changed by operators, not by traffic.
type Store interface {
	// Create stores a new event; ErrExists when its id is taken.
	Create(ctx context.Context, e Event) error
	// Update replaces an existing event; ErrNotFound when there is none.
	Update(ctx context.Context, e Event) error
	// Get returns one event.
	Get(ctx context.Context, id string) (Event, error)
	// List returns every event, by id.
	List(ctx context.Context) ([]Event, error)
	// Delete removes an event (after its retention).
	Delete(ctx context.Context, id string) error
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// MemoryStore is the in-process Store.
type MemoryStore struct {
	mu     sync.Mutex
	events map[string]Event
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{events: map[string]Event{}} }

// Create implements Store.
func (m *MemoryStore) Create(_ context.Context, e Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.events[e.ID]; ok {
		return fmt.Errorf("%w: %s", ErrExists, e.ID)
	}
	m.events[e.ID] = clone(e)
	return nil
}

// Update implements Store.
func (m *MemoryStore) Update(_ context.Context, e Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.events[e.ID]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, e.ID)
	}
	m.events[e.ID] = clone(e)
	return nil
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, id string) (Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.events[id]
	if !ok {
		return Event{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return clone(e), nil
}

// List implements Store.
func (m *MemoryStore) List(_ context.Context) ([]Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Event, 0, len(m.events))
	for _, e := range m.events {
		out = append(out, clone(e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.events, id)
	return nil
}

// clone copies e deeply, so a caller's later changes do not reach the store.
func clone(e Event) Event {
	b, _ := json.Marshal(e)
	var c Event
	_ = json.Unmarshal(b, &c)
	return c
}

// RedisStore keeps every event as JSON in one hash, danmaku:events, field =
// event id. One key is one round trip for a Directory's reload, and the
// events of a deployment are few and small.
type RedisStore struct{ rdb redis.UniversalClient }

// NewRedisStore returns a Store on rdb.
func NewRedisStore(rdb redis.UniversalClient) *RedisStore { return &RedisStore{rdb: rdb} }

// EventsKey is the hash the events live in.
const EventsKey = redisx.Prefix + "events"

// updateScript replaces a field only if it exists, atomically.
var updateScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// Create implements Store.
func (r *RedisStore) Create(ctx context.Context, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	ok, err := r.rdb.HSetNX(ctx, EventsKey, e.ID, b).Result()
	if err != nil {
		return fmt.Errorf("event: create %s: %w", e.ID, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrExists, e.ID)
	}
	return nil
}

// Update implements Store.
func (r *RedisStore) Update(ctx context.Context, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	n, err := updateScript.Run(ctx, r.rdb, []string{EventsKey}, e.ID, b).Int()
	if err != nil {
		return fmt.Errorf("event: update %s: %w", e.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, e.ID)
	}
	return nil
}

// Get implements Store.
func (r *RedisStore) Get(ctx context.Context, id string) (Event, error) {
	b, err := r.rdb.HGet(ctx, EventsKey, id).Bytes()
	if errors.Is(err, redis.Nil) {
		return Event{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Event{}, fmt.Errorf("event: get %s: %w", id, err)
	}
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("event: %s in Redis is not valid: %w", id, err)
	}
	return e, nil
}

// List implements Store. An entry that does not decode is skipped: one bad
// write by hand must not take every room offline.
func (r *RedisStore) List(ctx context.Context) ([]Event, error) {
	m, err := r.rdb.HGetAll(ctx, EventsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("event: list: %w", err)
	}
	out := make([]Event, 0, len(m))
	for _, v := range m {
		var e Event
		if json.Unmarshal([]byte(v), &e) == nil && e.Validate() == nil {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Delete implements Store.
func (r *RedisStore) Delete(ctx context.Context, id string) error {
	if err := r.rdb.HDel(ctx, EventsKey, id).Err(); err != nil {
		return fmt.Errorf("event: delete %s: %w", id, err)
	}
	return nil
}
