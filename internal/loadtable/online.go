package loadtable

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
	"danmaku/sdk/wire"
)

// OnlineTable is where edges report how many viewers each room has on them
// and ingest nodes read them: a room bucket's capacity follows its room's
// online count. It is kept apart from the load table on purpose: the
// allocators read loads every 5 to 50 ms and need no per-room counts, which made
// the table grow with nodes × rooms; the room buckets need the counts about
// once a second. Both tables of this package implement it.
type OnlineTable interface {
	// ReportOnline replaces node's per-room viewer counts.
	ReportOnline(ctx context.Context, node string, rooms map[string]int) error
	// RemoveOnline forgets node's counts (clean shutdown).
	RemoveOnline(ctx context.Context, node string) error
	// Online returns every node's counts, by node id. A node's counts are
	// current only while the node reports its load: readers skip the
	// counts of nodes the load table does not show alive.
	Online(ctx context.Context) (map[string]map[string]int, error)
}

var (
	_ OnlineTable = (*MemoryTable)(nil)
	_ OnlineTable = (*RedisTable)(nil)
)

// ReportOnline implements OnlineTable.
func (t *MemoryTable) ReportOnline(ctx context.Context, node string, rooms map[string]int) error {
	if node == "" {
		return ErrNoID
	}
	t.mu.Lock()
	if t.online == nil {
		t.online = map[string]map[string]int{}
	}
	t.online[node] = maps.Clone(rooms)
	t.mu.Unlock()
	return nil
}

// RemoveOnline implements OnlineTable.
func (t *MemoryTable) RemoveOnline(ctx context.Context, node string) error {
	t.mu.Lock()
	delete(t.online, node)
	t.mu.Unlock()
	return nil
}

// Online implements OnlineTable.
func (t *MemoryTable) Online(ctx context.Context) (map[string]map[string]int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]map[string]int, len(t.online))
	for n, rooms := range t.online {
		out[n] = maps.Clone(rooms)
	}
	return out, nil
}

// onlineKey is shard k of the Redis online counts: a hash, field = node id,
// value = encodeOnline. Sharded like the load table so that no one key
// holds every edge.
func onlineKey(k int) string {
	return redisx.Prefix + "{online:" + strconv.Itoa(k) + "}"
}

// encodeOnline writes rooms as "room=n,room=n": room names hold neither
// "=" nor "," (wire.ValidRoom).
func encodeOnline(rooms map[string]int) string {
	var b strings.Builder
	for room, n := range rooms {
		if n <= 0 || !wire.ValidRoom(room) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(room)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// maxOnlinePerRoom bounds one node's count for one room in a record.
const maxOnlinePerRoom = 1 << 30

// decodeOnline reads what encodeOnline wrote.
func decodeOnline(s string) (map[string]int, error) {
	rooms := map[string]int{}
	for s != "" {
		var kv string
		kv, s, _ = strings.Cut(s, ",")
		room, num, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(num)
		// A node holds far fewer than a billion viewers; the bound keeps a
		// bad record from overflowing the sums.
		if !ok || err != nil || n < 0 || n > maxOnlinePerRoom || !wire.ValidRoom(room) {
			return nil, fmt.Errorf("loadtable: bad online record %.40q", kv)
		}
		rooms[room] += n
	}
	return rooms, nil
}

// ReportOnline implements OnlineTable.
func (t *RedisTable) ReportOnline(ctx context.Context, node string, rooms map[string]int) error {
	if node == "" {
		return ErrNoID
	}
	if err := t.rdb.HSet(ctx, onlineKey(loadShardOf(node)), node, encodeOnline(rooms)).Err(); err != nil {
		return fmt.Errorf("loadtable: report online of %s: %w", node, err)
	}
	return nil
}

// RemoveOnline implements OnlineTable.
func (t *RedisTable) RemoveOnline(ctx context.Context, node string) error {
	if err := t.rdb.HDel(ctx, onlineKey(loadShardOf(node)), node).Err(); err != nil {
		return fmt.Errorf("loadtable: remove online of %s: %w", node, err)
	}
	return nil
}

// Online implements OnlineTable: one pipelined HGETALL per shard. A record
// that does not decode is left out and counted in Skipped.
func (t *RedisTable) Online(ctx context.Context) (map[string]map[string]int, error) {
	cmds := make([]*redis.MapStringStringCmd, Shards)
	if _, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range cmds {
			cmds[k] = p.HGetAll(ctx, onlineKey(k))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("loadtable: online counts: %w", err)
	}
	out := map[string]map[string]int{}
	for _, c := range cmds {
		for node, rec := range c.Val() {
			rooms, err := decodeOnline(rec)
			if err != nil {
				t.skipped.Add(1)
				continue
			}
			out[node] = rooms
		}
	}
	return out, nil
}

// pruneOnline forgets the counts of nodes whose load reports were pruned.
func (t *RedisTable) pruneOnline(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	byShard := map[int][]string{}
	for _, id := range ids {
		k := loadShardOf(id)
		byShard[k] = append(byShard[k], id)
	}
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, ids := range byShard {
			p.HDel(ctx, onlineKey(k), ids...)
		}
		return nil
	})
	return err
}

// Online reporting defaults: counts go out at most once a second when they
// changed, and every refreshOnline regardless (a store that failed over
// gets them back).
const (
	defaultOnlineInterval = time.Second
	refreshOnline         = 30 * time.Second
)

// OnlineReporter sends an edge's per-room viewer counts to an OnlineTable
// once a second while they change, at least every 30 s, and removes them
// when it stops.
type OnlineReporter struct {
	Table OnlineTable
	Node  string
	// Interval between looks. Zero: 1 s.
	Interval time.Duration
	// Rooms returns the node's viewers per room (rooms without viewers
	// left out).
	Rooms func() map[string]int
	Now   func() time.Time
	// Ready holds reports back until true (the node's keyring is loaded).
	// Nil: ready at once.
	Ready func() bool
}

// Run reports until ctx is done.
func (r *OnlineReporter) Run(ctx context.Context) error {
	iv := r.Interval
	if iv <= 0 {
		iv = defaultOnlineInterval
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	var (
		last     map[string]int
		lastAt   time.Time
		reported bool
	)
	for {
		if r.Ready == nil || r.Ready() {
			rooms := r.Rooms()
			at := now()
			if !reported || !maps.Equal(rooms, last) || at.Sub(lastAt) >= refreshOnline {
				if r.Table.ReportOnline(ctx, r.Node, rooms) == nil {
					last, lastAt, reported = rooms, at, true
				}
			}
		}
		select {
		case <-ctx.Done():
			if reported {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = r.Table.RemoveOnline(rctx, r.Node)
				cancel()
			}
			return nil
		case <-t.C:
		}
	}
}
