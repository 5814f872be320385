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

	"danmaku/internal/redisx"
	"danmaku/sdk/wire"
)

var _ ReportStore = (*RedisReportStore)(nil)

// RedisReportStore is the ReportStore shared by every ingest node. A
// room's reports sit under its hash tag, so each call is one script on the
// room's shard:
//
//	danmaku:{room:R}:reports               sorted set: "k:id" by report count
//	danmaku:{room:R}:report:K:ID           hash: id, k, user, nick, text, known, count, first, last (ms), r:REASON counts, d (decision JSON), da (its action)
//	danmaku:{room:R}:report:K:ID:by        set of the reporters' user ids
//	danmaku:{room:R}:reportsof:USER        list of decisions about USER's messages (JSON, latest first)
//
// Every key expires at the room's Report.Expires (PEXPIREAT on each
// report; a decision's history entry takes the message's expiry), so a
// room's reports leave with its event without a sweeper.
type RedisReportStore struct {
	rdb    redis.UniversalClient
	bounds ReportBounds
}

// NewRedisReportStore returns the reports kept in rdb, with bounds b (zero
// fields: the defaults).
func NewRedisReportStore(rdb redis.UniversalClient, b ReportBounds) *RedisReportStore {
	return &RedisReportStore{rdb: rdb, bounds: b.withDefaults()}
}

func reportsKey(room string) string { return redisx.RoomKey(room, "reports") }
func reportItemPrefix(room string) string {
	return redisx.RoomKey(room, "report:")
}
func reportHistoryKey(room, user string) string { return redisx.RoomKey(room, "reportsof:"+user) }

// KEYS queue, item, reporters; ARGV member, reporter, reason, at ms, exp
// ms, max messages, max reporters, id, k, user, nick, text, known, item
// prefix. Returns {outcome, evicted}: outcome 0 counted, 1 duplicate, 2
// uncounted (reporters full).
var reportAddScript = redis.NewScript(`
local z, h, s = KEYS[1], KEYS[2], KEYS[3]
local member = ARGV[1]
local evicted = 0
-- Expiry last: a room whose expiry has passed is then left empty.
local function done(outcome)
  redis.call('PEXPIREAT', z, ARGV[5])
  redis.call('PEXPIREAT', h, ARGV[5])
  redis.call('PEXPIREAT', s, ARGV[5])
  return {outcome, evicted}
end
if not redis.call('ZSCORE', z, member) then
  if redis.call('ZCARD', z) >= tonumber(ARGV[6]) then
    local worst = redis.call('ZPOPMIN', z)
    if worst[1] then
      redis.call('DEL', ARGV[14] .. worst[1], ARGV[14] .. worst[1] .. ':by')
      evicted = 1
    end
  end
  redis.call('DEL', h, s)
  redis.call('HSET', h, 'id', ARGV[8], 'k', ARGV[9], 'user', ARGV[10], 'nick', ARGV[11], 'text', ARGV[12], 'known', ARGV[13], 'first', ARGV[4], 'last', ARGV[4], 'count', 0)
  redis.call('ZADD', z, 0, member)
elseif ARGV[13] == '1' and redis.call('HGET', h, 'known') ~= '1' then
  redis.call('HSET', h, 'user', ARGV[10], 'nick', ARGV[11], 'text', ARGV[12], 'known', '1')
end
if redis.call('SISMEMBER', s, ARGV[2]) == 1 then
  return done(1)
end
if redis.call('SCARD', s) >= tonumber(ARGV[7]) then
  return done(2)
end
redis.call('SADD', s, ARGV[2])
redis.call('HINCRBY', h, 'count', 1)
redis.call('HINCRBY', h, 'r:' .. ARGV[3], 1)
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', h, 'last')) then
  redis.call('HSET', h, 'last', ARGV[4])
end
redis.call('ZINCRBY', z, 1, member)
return done(0)
`)

// Add implements ReportStore.
func (r *RedisReportStore) Add(ctx context.Context, rep Report) (ReportAdded, error) {
	if err := rep.Validate(); err != nil {
		return ReportAdded{}, err
	}
	m := rep.Message
	member := reportMember(m.Kind, m.ID)
	h := reportItemPrefix(rep.Room) + member
	known := "0"
	if m.Known {
		known = "1"
	}
	res, err := reportAddScript.Run(ctx, r.rdb, []string{reportsKey(rep.Room), h, h + ":by"},
		member, rep.Reporter, rep.Reason, rep.At.UnixMilli(), rep.Expires.UnixMilli(), r.bounds.Messages, r.bounds.Reporters,
		m.ID, int(m.Kind), m.User, m.Nick, m.Text, known, reportItemPrefix(rep.Room)).Int64Slice()
	if err != nil {
		return ReportAdded{}, fmt.Errorf("ingest: add report: %w", err)
	}
	if len(res) != 2 {
		return ReportAdded{}, fmt.Errorf("ingest: add report: unexpected answer %v", res)
	}
	return ReportAdded{Duplicate: res[0] == 1, Uncounted: res[0] == 2, Evicted: res[1] == 1}, nil
}

// parseItem reads an item hash.
func parseItem(f map[string]string) (ReportItem, error) {
	k, err := strconv.Atoi(f["k"])
	if err != nil {
		return ReportItem{}, fmt.Errorf("ingest: report item: kind %q", f["k"])
	}
	it := ReportItem{ReportedMessage: ReportedMessage{ID: f["id"], Kind: wire.Kind(k), User: f["user"], Nick: f["nick"], Text: f["text"], Known: f["known"] == "1"},
		Reasons: map[string]int64{}}
	it.Count, _ = strconv.ParseInt(f["count"], 10, 64)
	first, _ := strconv.ParseInt(f["first"], 10, 64)
	last, _ := strconv.ParseInt(f["last"], 10, 64)
	it.First, it.Last = time.UnixMilli(first), time.UnixMilli(last)
	for name, v := range f {
		if reason, ok := strings.CutPrefix(name, "r:"); ok {
			it.Reasons[reason], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if d := f["d"]; d != "" {
		var dec ReportDecision
		if err := json.Unmarshal([]byte(d), &dec); err != nil {
			return ReportItem{}, fmt.Errorf("ingest: report item: decision: %w", err)
		}
		it.Decision = &dec
	}
	return it, nil
}

// Top implements ReportStore.
func (r *RedisReportStore) Top(ctx context.Context, room string, n int) ([]ReportItem, error) {
	if !wire.ValidRoom(room) {
		return nil, fmt.Errorf("%w: room %q", ErrBadReport, room)
	}
	out := []ReportItem{}
	if n <= 0 {
		return out, nil
	}
	members, err := r.rdb.ZRevRange(ctx, reportsKey(room), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("ingest: list reports: %w", err)
	}
	if len(members) == 0 {
		return out, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(members))
	for i, m := range members {
		cmds[i] = pipe.HGetAll(ctx, reportItemPrefix(room)+m)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("ingest: list reports: %w", err)
	}
	for _, c := range cmds {
		f := c.Val()
		if len(f) == 0 {
			continue // evicted or expired since the listing
		}
		it, err := parseItem(f)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// Get implements ReportStore.
func (r *RedisReportStore) Get(ctx context.Context, room string, kind wire.Kind, id string) (ReportItem, error) {
	if err := CheckReportRef(room, kind, id); err != nil {
		return ReportItem{}, err
	}
	f, err := r.rdb.HGetAll(ctx, reportItemPrefix(room)+reportMember(kind, id)).Result()
	if err != nil {
		return ReportItem{}, fmt.Errorf("ingest: get report: %w", err)
	}
	if len(f) == 0 {
		return ReportItem{}, fmt.Errorf("%w: %s %d:%s", ErrNoReport, room, kind, id)
	}
	return parseItem(f)
}

// KEYS item, history (or the item again: no sender); ARGV action,
// decision JSON, history bound. Returns -1 for no item, 0 for the same
// action again, 1 when recorded.
var reportDecideScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('HGET', KEYS[1], 'da') == ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'd', ARGV[2], 'da', ARGV[1])
if KEYS[2] ~= KEYS[1] then
  redis.call('LPUSH', KEYS[2], ARGV[2])
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
  local at = redis.call('PEXPIRETIME', KEYS[1])
  if at > 0 then
    redis.call('PEXPIREAT', KEYS[2], at)
  end
end
return 1
`)

// Decide implements ReportStore.
func (r *RedisReportStore) Decide(ctx context.Context, room string, kind wire.Kind, id string, d ReportDecision) (ReportItem, error) {
	if err := CheckReportRef(room, kind, id); err != nil {
		return ReportItem{}, err
	}
	if err := d.Validate(); err != nil {
		return ReportItem{}, err
	}
	it, err := r.Get(ctx, room, kind, id)
	if err != nil {
		return ReportItem{}, err
	}
	d.ID, d.Kind = id, kind
	j, err := json.Marshal(d)
	if err != nil {
		return ReportItem{}, fmt.Errorf("ingest: decide report: %w", err)
	}
	h := reportItemPrefix(room) + reportMember(kind, id)
	hist := h
	if it.User != "" {
		hist = reportHistoryKey(room, it.User)
	}
	res, err := reportDecideScript.Run(ctx, r.rdb, []string{h, hist}, d.Action, string(j), r.bounds.History).Int64()
	if err != nil {
		return ReportItem{}, fmt.Errorf("ingest: decide report: %w", err)
	}
	if res < 0 {
		return ReportItem{}, fmt.Errorf("%w: %s %d:%s", ErrNoReport, room, kind, id)
	}
	return r.Get(ctx, room, kind, id)
}

// History implements ReportStore.
func (r *RedisReportStore) History(ctx context.Context, room, user string) ([]ReportDecision, error) {
	if !wire.ValidRoom(room) {
		return nil, fmt.Errorf("%w: room %q", ErrBadReport, room)
	}
	out := []ReportDecision{}
	if user == "" {
		return out, nil
	}
	items, err := r.rdb.LRange(ctx, reportHistoryKey(room, user), 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("ingest: report history: %w", err)
	}
	for _, s := range items {
		var d ReportDecision
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			return nil, fmt.Errorf("ingest: report history: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}
