package gslb

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

// loadKey is the hash holding every node's newest report. It is one key, not
// one per node, so that a snapshot is one HGETALL; it needs no hash tag.
const loadKey = redisx.Prefix + "load"

var _ LoadTable = (*RedisLoadTable)(nil)

// RedisLoadTable is the LoadTable shared by every node and allocator: one
// hash, danmaku:load, field = node id, value = the NodeLoad as JSON, At as
// the node stamped it (so allocators judge staleness by the report, and a
// node that dies without Remove ages out of every snapshot's use).
//
// Load: with reports every 5 ms, N nodes make 200·N HSET/s (20k/s for 100
// nodes, well within one Redis for hundreds of nodes), and each allocator's
// sync is one HGETALL per 5 ms. The HGETALL returns every report, so its cost
// grows with N × report size; Rooms (one entry per hosted room) is what makes
// a report large, so an edge hosting thousands of rooms should report them
// less often than its load.
type RedisLoadTable struct {
	rdb     redis.UniversalClient
	skipped atomic.Uint64
}

// NewRedisLoadTable returns the load table kept in rdb.
func NewRedisLoadTable(rdb redis.UniversalClient) *RedisLoadTable {
	return &RedisLoadTable{rdb: rdb}
}

// Report implements LoadTable.
func (t *RedisLoadTable) Report(ctx context.Context, l NodeLoad) error {
	if l.ID == "" {
		return ErrNoID
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("gslb: report load of %s: %w", l.ID, err)
	}
	if err := t.rdb.HSet(ctx, loadKey, l.ID, b).Err(); err != nil {
		return fmt.Errorf("gslb: report load of %s: %w", l.ID, err)
	}
	return nil
}

// Snapshot implements LoadTable. A field that does not decode to a report of
// its own node (written by a newer or broken reporter) is left out and
// counted in Skipped, so one bad field does not blind every allocator.
func (t *RedisLoadTable) Snapshot(ctx context.Context) ([]NodeLoad, error) {
	m, err := t.rdb.HGetAll(ctx, loadKey).Result()
	if err != nil {
		return nil, fmt.Errorf("gslb: load snapshot: %w", err)
	}
	out := make([]NodeLoad, 0, len(m))
	for id, v := range m {
		var l NodeLoad
		if err := json.Unmarshal([]byte(v), &l); err != nil || l.ID != id {
			t.skipped.Add(1)
			continue
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Skipped returns how many fields snapshots have left out as undecodable.
func (t *RedisLoadTable) Skipped() uint64 { return t.skipped.Load() }

// Remove implements LoadTable.
func (t *RedisLoadTable) Remove(ctx context.Context, id string) error {
	if err := t.rdb.HDel(ctx, loadKey, id).Err(); err != nil {
		return fmt.Errorf("gslb: remove %s: %w", id, err)
	}
	return nil
}

// Prune removes the reports made before cutoff and the fields that do not
// decode, and returns how many it removed. Nodes that die without Remove
// stay in the hash otherwise, and every snapshot reads them. A node still
// alive whose old report is pruned puts it back at its next report.
func (t *RedisLoadTable) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	m, err := t.rdb.HGetAll(ctx, loadKey).Result()
	if err != nil {
		return 0, fmt.Errorf("gslb: prune load table: %w", err)
	}
	var old []string
	for id, v := range m {
		var l NodeLoad
		if err := json.Unmarshal([]byte(v), &l); err != nil || l.ID != id || l.At.Before(cutoff) {
			old = append(old, id)
		}
	}
	if len(old) == 0 {
		return 0, nil
	}
	n, err := t.rdb.HDel(ctx, loadKey, old...).Result()
	if err != nil {
		return 0, fmt.Errorf("gslb: prune load table: %w", err)
	}
	return int(n), nil
}
