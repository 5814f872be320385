package loadtable

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

// Shards is how many shards the Redis load table spreads its reports
// over. Every process of a deployment must agree on it (it decides which
// key a node's report lands in), so it is a constant rather than a flag.
// Sixteen spread a few thousand nodes over a Cluster's masters while an
// allocator's sync stays one pipelined round trip.
const Shards = 16

// logMaxLen bounds each shard's change log (approximately: Redis trims
// whole blocks). Readers do not look for entries trimmed before they read
// them; a View reads whole after any gap longer than its WholeAfterGap
// (100 ms by default and for an allocator at its default MaxSync), and
// 4,096 entries a shard cannot be written within that gap (65k reports a
// second on one shard, a million on the table, is far beyond what one
// Redis takes). Full, the logs hold a few MB.
const logMaxLen = 4096

// tombstone is the log entry of a removed node.
const tombstone = "-"

// loadShardKeys are shard k's keys, in one Cluster slot by their hash tag
// so that one MULTI writes both: the hash of records (field = node id,
// value = encodeRecord) and the change log, a stream whose entries are
// {node id: record} for each report and {node id: "-"} for each removal.
func loadShardKeys(k int) (nodes, log string) {
	tag := redisx.Prefix + "{load:" + strconv.Itoa(k) + "}:"
	return tag + "nodes", tag + "log"
}

// loadShardOf is the shard of node id.
func loadShardOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % Shards)
}

// pruneScript removes the given fields of one shard if they still hold the
// records the pruner read (a node that reported meanwhile keeps its new
// record), logging each removal: KEYS nodes, log; ARGV maxlen, id1, rec1,
// id2, rec2, ... It answers the ids removed. It runs twice a minute, so a
// script's cost does not matter here; reports and syncs use none.
var pruneScript = redis.NewScript(`
local gone = {}
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', ARGV[i], '-')
    gone[#gone + 1] = ARGV[i]
  end
end
return gone
`)

var (
	_ Table        = (*RedisTable)(nil)
	_ ChangeReader = (*RedisTable)(nil)
)

// RedisTable is the Table shared by every node and allocator. A
// node's report is one field of its shard's hash (Shards shards, each
// in a Cluster slot of its own, so no one key or shard carries every node),
// its value a short text record (encodeRecord) with At as the node stamped
// it (allocators judge staleness by the report, so a node that dies without
// Remove ages out of every snapshot's use). Each write also appends to the
// shard's change log (a stream), in the same MULTI, so that an allocator's
// sync — every 5 to 50 ms — reads only the records written since its last one:
// one pipelined round trip of plain commands (no script: Lua costs Redis
// about a microsecond per record it moves, a stream range a fraction of
// that), carrying nothing for a shard where nothing changed.
type RedisTable struct {
	rdb     redis.UniversalClient
	skipped atomic.Uint64
}

// NewRedisTable returns the load table kept in rdb.
func NewRedisTable(rdb redis.UniversalClient) *RedisTable {
	return &RedisTable{rdb: rdb}
}

// Report implements Table: HSET and XADD in one MULTI.
func (t *RedisTable) Report(ctx context.Context, l NodeLoad) error {
	if l.ID == "" {
		return ErrNoID
	}
	rec, err := encodeRecord(make([]byte, 0, 96), &l)
	if err != nil {
		return fmt.Errorf("loadtable: report load of %s: %w", l.ID, err)
	}
	nodes, log := loadShardKeys(loadShardOf(l.ID))
	if _, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, nodes, l.ID, rec)
		p.XAdd(ctx, &redis.XAddArgs{Stream: log, MaxLen: logMaxLen, Approx: true, Values: []any{l.ID, rec}})
		return nil
	}); err != nil {
		return fmt.Errorf("loadtable: report load of %s: %w", l.ID, err)
	}
	return nil
}

// Remove implements Table: the record goes and the log says so, so that
// readers following it drop the node at their next sync.
func (t *RedisTable) Remove(ctx context.Context, id string) error {
	nodes, log := loadShardKeys(loadShardOf(id))
	if _, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, nodes, id)
		p.XAdd(ctx, &redis.XAddArgs{Stream: log, MaxLen: logMaxLen, Approx: true, Values: []any{id, tombstone}})
		return nil
	}); err != nil {
		return fmt.Errorf("loadtable: remove %s: %w", id, err)
	}
	return nil
}

// Shards implements ChangeReader.
func (t *RedisTable) Shards() int { return Shards }

// Snapshot implements Table: every shard read whole.
func (t *RedisTable) Snapshot(ctx context.Context) ([]NodeLoad, error) {
	ch, _, err := t.Changes(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("loadtable: load snapshot: %w", err)
	}
	sortLoads(ch.Loads)
	return ch.Loads, nil
}

// Skipped returns how many records reads have left out as undecodable.
func (t *RedisTable) Skipped() uint64 { return t.skipped.Load() }

// shardRead is the commands one sync sends for one shard: from a
// position, the log after it; for a whole read, the log's last entry first
// (the position the read stands at: a write between the two commands is
// read again next time, never missed), then the hash.
type shardRead struct {
	after, last *redis.Cmd
	all         *redis.MapStringStringCmd
}

// Changes implements ChangeReader: one pipelined round trip (per Cluster
// master) for every shard. A cursor position is a stream entry id ("0-0":
// the log was empty; "": never read, read whole). An idle shard costs an
// empty range.
//
// The read trusts the log to continue the position: it does not look for
// entries trimmed or lost before it read them. A reader makes sure of it
// by reading whole after a failed read or a long gap, and every few
// seconds regardless (View): a store that failed over may have lost
// a few writes behind a log that then went on.
func (t *RedisTable) Changes(ctx context.Context, cursor []string) (Changes, []string, error) {
	ch := Changes{ShardOf: loadShardOf}
	next := make([]string, Shards)
	if len(cursor) == Shards {
		copy(next, cursor)
	}
	reads := make([]shardRead, Shards)
	if _, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range reads {
			nodes, log := loadShardKeys(k)
			if next[k] == "" {
				reads[k].last = p.Do(ctx, "XREVRANGE", log, "+", "-", "COUNT", 1)
				reads[k].all = p.HGetAll(ctx, nodes)
			} else {
				reads[k].after = p.Do(ctx, "XRANGE", log, "("+next[k], "+")
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return Changes{}, cursor, err
	}
	for k := range reads {
		if err := t.takeRead(&reads[k], &next[k], &ch); err != nil {
			return Changes{}, cursor, fmt.Errorf("loadtable: load shard %d: %w", k, err)
		}
		if reads[k].all != nil {
			ch.Reset = append(ch.Reset, k)
		}
	}
	return ch, next, nil
}

// takeRead applies one shard's answers to ch and its position.
func (t *RedisTable) takeRead(r *shardRead, pos *string, ch *Changes) error {
	if r.all != nil {
		last, err := r.last.Slice()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		m, err := r.all.Result()
		if err != nil {
			return err
		}
		for id, rec := range m {
			t.take(ch, id, rec)
		}
		*pos = "0-0" // an empty log: everything after its start
		if len(last) > 0 {
			id, _, ok := entry(last[0])
			if !ok {
				return errors.New("unexpected log entry")
			}
			*pos = id
		}
		return nil
	}
	entries, err := r.after.Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for _, e := range entries {
		id, fields, ok := entry(e)
		if !ok {
			return errors.New("unexpected log entry")
		}
		*pos = id
		for i := 0; i+1 < len(fields); i += 2 {
			node, _ := fields[i].(string)
			rec, _ := fields[i+1].(string)
			t.take(ch, node, rec)
		}
	}
	return nil
}

// take adds one record to ch.
func (t *RedisTable) take(ch *Changes, id, rec string) {
	ch.Bytes += len(id) + len(rec)
	if rec == tombstone {
		ch.Removed = append(ch.Removed, id)
		return
	}
	l, err := decodeRecord(id, rec)
	if err != nil || id == "" {
		ch.Skipped++
		t.skipped.Add(1)
		return
	}
	ch.Loads = append(ch.Loads, l)
}

// entry reads one stream entry of a raw reply: [id, [field, value, ...]].
func entry(e any) (string, []any, bool) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return "", nil, false
	}
	id, ok1 := pair[0].(string)
	fields, ok2 := pair[1].([]any)
	return id, fields, ok1 && ok2
}

// Prune removes the reports made before cutoff and the records that do not
// decode, logging each removal, and returns how many it removed. Nodes that
// die without Remove stay in their shard otherwise, and every whole read
// carries them. A node still alive whose
// old report is pruned puts it back at its next report.
func (t *RedisTable) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	args := make([][]any, Shards)
	cmds := make([]*redis.MapStringStringCmd, Shards)
	if _, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range cmds {
			nodes, _ := loadShardKeys(k)
			cmds[k] = p.HGetAll(ctx, nodes)
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("loadtable: prune load table: %w", err)
	}
	for k, cmd := range cmds {
		for id, rec := range cmd.Val() {
			if prunable(id, rec, cutoff) {
				if args[k] == nil {
					args[k] = []any{logMaxLen}
				}
				args[k] = append(args[k], id, rec)
			}
		}
	}
	var removed []string
	for k, a := range args {
		if len(a) == 0 {
			continue
		}
		nodes, log := loadShardKeys(k)
		gone, err := pruneScript.Run(ctx, t.rdb, []string{nodes, log}, a...).StringSlice()
		if err != nil {
			return len(removed), fmt.Errorf("loadtable: prune load table: %w", err)
		}
		removed = append(removed, gone...)
	}
	// Their online counts go with them: nobody reads them any more.
	if err := t.pruneOnline(ctx, removed); err != nil {
		return len(removed), fmt.Errorf("loadtable: prune online counts: %w", err)
	}
	return len(removed), nil
}

// prunable says whether a record is to be pruned: a report older than
// cutoff, or a record that does not decode.
func prunable(id, rec string, cutoff time.Time) bool {
	l, err := decodeRecord(id, rec)
	return err != nil || l.At.Before(cutoff)
}
