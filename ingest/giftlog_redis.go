package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

var _ GiftLog = (*RedisGiftLog)(nil)

// defaultGiftRegisterEvery is how often a RedisGiftLog re-registers a room
// it appends to, as the stream store's RegisterEvery default.
const defaultGiftRegisterEvery = time.Minute

// defaultWaitTimeout bounds WAIT when RedisGiftLogConfig.WaitTimeout is
// zero. A replica in the same region acknowledges within a millisecond or
// two; half a second means it is gone or far behind. It must stay well
// below the client's read timeout (redisx: 1 s), which bounds the WAIT's
// call too.
const defaultWaitTimeout = 500 * time.Millisecond

// maxGiftAttempts bounds how often AppendGift sends its script again after
// an answer that says it did not run it (MOVED while the slot map is being
// re-read, NOSCRIPT on a node that never ran it).
const maxGiftAttempts = 4

// ErrNotReplicated is returned (wrapped) by AppendGift when the gift is
// stored on the master but fewer than WaitReplicas replicas acknowledged it
// within WaitTimeout. Like every AppendGift error it is ambiguous: the
// gift may be stored, and a retry with the same order id answers its one
// id once a replica has it.
var ErrNotReplicated = errors.New("ingest: gift not acknowledged by enough replicas")

// ErrReplicasOffline is returned (wrapped) by AppendGift under WaitReplicas
// for a new order when the room's master has fewer than WaitReplicas
// replicas online (a replica lost, or one promoted in a failover leaving
// none behind, or one still in its first sync): nothing is stored, since no
// WAIT could confirm it, and a retry with the same order id stores it once
// a replica is back. Unlike ErrNotReplicated it is not ambiguous.
var ErrReplicasOffline = errors.New("ingest: gift not stored: too few replicas of the room's master online")

// RedisGiftLogConfig configures a RedisGiftLog.
type RedisGiftLogConfig struct {
	// Client talks to the Redis that holds Streams. Required. The gift log
	// never closes it.
	Client redis.UniversalClient
	// Streams is the Redis stream store the slicer and edge read: the gift
	// log writes its Live lanes, with its key layout and entry encoding,
	// and registers rooms through it. Required.
	Streams *stream.RedisStore
	// OrderTTL is how long an order id stays deduplicated. Zero: 24 h.
	OrderTTL time.Duration
	// RegisterEvery is how often this process re-registers a room it
	// appends gifts to (Streams.OpenRoom, which keeps a recorded open
	// time), so that a registry lost with a Redis restart is rebuilt.
	// Zero: 1 minute.
	RegisterEvery time.Duration
	// Clock times RegisterEvery and, with its timers when it has them
	// (clock.TimersOf), the pause before a MOVED retry; entry ids and the
	// order TTL run on Redis's clock. Nil: the real clock.
	Clock clock.Clock
	// Logger receives registration warnings. Nil: slog.Default().
	Logger *slog.Logger
	// WaitReplicas, when positive, makes AppendGift confirm a gift only
	// once that many replicas of the room's master have it (Redis WAIT
	// after the script, on the same connection), and fail with
	// ErrNotReplicated when fewer do within WaitTimeout. Redis replicates
	// asynchronously: a master killed right after answering a gift can
	// take it along when its replica is promoted, and the business server,
	// answered 200, never retries it. With WaitReplicas 1 an answered gift
	// survives the loss of its master. The price: one replica round trip
	// per gift, and a master with fewer replicas online than WaitReplicas
	// refuses every new order, storing nothing (ErrReplicasOffline), until
	// one is back — run two replicas per master, so that one is left after
	// a failover. A gift stored whose WAIT then fell short (a replica slow
	// or gone in that moment) is answered ErrNotReplicated, and a retry
	// with the same order id answers it stored once a replica has it.
	// Needs a *redis.Client or *redis.ClusterClient. Zero: answer as soon
	// as the master has it.
	WaitReplicas int
	// WaitTimeout bounds the wait for replicas. Zero: 500 ms.
	WaitTimeout time.Duration
	// BacklogBound is room's gift backlog bound in seconds of its gift
	// budget (the event's gift_backlog_s): a new order is refused
	// (ErrGiftBacklog) while the backlog the room's slicer leader publishes
	// (slicer.RedisBacklog, beside the room's streams) is over it. Nil, or
	// an answer that is not positive: 30 s.
	BacklogBound func(room string) float64
}

// RedisGiftLog is the GiftLog shared by every ingest node. One Lua script
// looks the order up and, if it is new, appends the gift and records the
// order, so the three are one atomic step in Redis; a retried script — by
// go-redis, or by the business server after an ambiguous error — finds the
// order and appends nothing.
//
// A room's order records sit beside its streams, under its hash tag:
//
//	danmaku:{room:ID}:live          the room's Live lane (stream.RedisStore's key)
//	danmaku:{room:ID}:order:ORDER   the entry id of ORDER, expiring after OrderTTL
//	danmaku:{room:ID}:orderterms:ORDER  ORDER's GiftTerms (JSON), expiring with it
//	danmaku:{room:ID}:giftbacklog   the room's gift backlog in seconds (slicer.RedisBacklog)
//
// and, under the order's own hash tag (so the orders spread over the
// shards),
//
//	danmaku:{order:ORDER}:room      the room ORDER was first used in, expiring after OrderTTL
//
// claimed (SET NX GET) before the script: an order id is the business
// server's, unique across rooms, and the same id in another room is a
// conflict rather than a second order. The claim cannot be in the script
// (another slot), so it is a step of its own: a claim whose gift then
// failed or was refused stays, and a retry in the same room passes it.
//
// so the script's keys share a Redis Cluster slot, and a new order is
// checked against the room's backlog in the same atomic step. The rooms registry
// lives in another slot; a room is registered (Streams.OpenRoom) after its
// first gift in each RegisterEvery of this process, as the stream store does
// after its own appends.
//
// With WaitReplicas, a gift is confirmed only once replicas have it: an
// acknowledged gift then survives a master that dies before replicating
// (see RedisGiftLogConfig.WaitReplicas for the price).
//
// RedisGiftLog is safe for concurrent use. It starts no goroutines.
type RedisGiftLog struct {
	client       redis.UniversalClient
	streams      *stream.RedisStore
	ttlMs        int64
	rooms        registrar
	waitReplicas int
	waitTimeout  time.Duration
	bound        backlogBound
	timers       clock.Timers // the config's Clock's (clock.TimersOf): the MOVED pause
}

// NewRedisGiftLog checks cfg, applies its defaults and returns the gift log.
// It sends nothing to Redis.
func NewRedisGiftLog(cfg RedisGiftLogConfig) (*RedisGiftLog, error) {
	if cfg.Client == nil || cfg.Streams == nil {
		return nil, errors.New("ingest: redis gift log: Client and Streams are required")
	}
	if cfg.OrderTTL == 0 {
		cfg.OrderTTL = defaultOrderTTL
	}
	px, err := redisx.PX(cfg.OrderTTL)
	if err != nil {
		return nil, fmt.Errorf("ingest: redis gift log: OrderTTL: %w", err)
	}
	if cfg.RegisterEvery < 0 {
		return nil, fmt.Errorf("ingest: redis gift log: RegisterEvery %v is negative", cfg.RegisterEvery)
	}
	if cfg.RegisterEvery == 0 {
		cfg.RegisterEvery = defaultGiftRegisterEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WaitReplicas < 0 || cfg.WaitTimeout < 0 {
		return nil, fmt.Errorf("ingest: redis gift log: WaitReplicas %d and WaitTimeout %v must not be negative", cfg.WaitReplicas, cfg.WaitTimeout)
	}
	if cfg.WaitReplicas > 0 {
		switch cfg.Client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("ingest: redis gift log: WaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T", cfg.Client)
		}
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = defaultWaitTimeout
	}
	l := &RedisGiftLog{
		client:       cfg.Client,
		streams:      cfg.Streams,
		ttlMs:        px,
		rooms:        registrar{streams: cfg.Streams, every: cfg.RegisterEvery, clock: clock.Or(cfg.Clock), log: cfg.Logger},
		waitReplicas: cfg.WaitReplicas,
		waitTimeout:  cfg.WaitTimeout,
		timers:       clock.TimersOf(cfg.Clock),
	}
	l.bound.set(cfg.BacklogBound)
	return l, nil
}

// orderKey returns the key of room's record of orderID. The order id comes
// after the room's hash tag, so whatever it holds ('{', '}', ':') it cannot
// move the key to another slot or collide with another room's.
func orderKey(room, orderID string) string {
	return redisx.RoomKey(room, "order:"+orderID)
}

// orderTermsKey returns the key of the terms of room's order orderID,
// beside its record. A key of its own rather than a second part of the
// record's value: a node of an older version, during a rolling upgrade,
// reads the record as the entry id and must still find just that.
func orderTermsKey(room, orderID string) string {
	return redisx.RoomKey(room, "orderterms:"+orderID)
}

// orderRoomKey returns the key of the room orderID was first used in,
// under the order's own hash tag. An order id holding '}' ends the tag
// early: the key is still the order's alone, only its slot differs.
func orderRoomKey(orderID string) string {
	return redisx.Prefix + "{order:" + orderID + "}:room"
}

// claimRoom records room as orderID's first room unless one is recorded,
// and returns the conflict if that was another room.
func (l *RedisGiftLog) claimRoom(ctx context.Context, room, orderID string) error {
	first, err := l.client.SetArgs(ctx, orderRoomKey(orderID), room, redis.SetArgs{Mode: "NX", Get: true, TTL: time.Duration(l.ttlMs) * time.Millisecond}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("claim the order id's room: %w", err)
	}
	return roomConflict(room, orderID, first)
}

// giftBacklogKey is the key where the room's slicer leader publishes its
// gift backlog: slicer.RedisBacklog's key (ingest does not import the
// slicer; a test of both checks that they agree).
func giftBacklogKey(room string) string { return redisx.RoomKey(room, "giftbacklog") }

// appendGiftScript appends a gift once per order.
//
// KEYS[1] the room's Live stream; KEYS[2] the room's order key; KEYS[3] the
// room's gift backlog key; KEYS[4] the order's terms key. ARGV[1] the
// msgpack message (entry field "m"); ARGV[2] the order id (entry field
// "o"); ARGV[3] the order TTL in ms; ARGV[4] "1" when a WAIT follows;
// ARGV[5] the backlog bound in seconds; ARGV[6] the gift's terms (JSON);
// ARGV[7] the replicas the WAIT needs (with ARGV[4] "1").
// Returns {entry id, 1, first terms} for an order already appended (the
// terms "" when the record has none: written by an older version), {entry
// id, 0} for one appended now, {"", 2, backlog} for a new order refused
// because the backlog is over the bound, and {"", 3, online} for a new
// order refused because fewer than ARGV[7] replicas are online (nothing
// written in either: a WAIT could not confirm the gift, and a stored gift
// answered 503 for as long as the replica is missing is what this
// prevents). The order check comes first: a repeat of an appended order
// gets its answer whatever the backlog. The caller compares the terms: a
// repeat with other terms is the order id reused, not a retry.
//
// Online replicas are counted in INFO replication ("state=online": a
// replica past its first sync); a replica that is online but slow still
// lets the WAIT fall short, which the retry then settles.
//
// The backlog key holds "SECONDS PERGIFT" (slicer.RedisBacklog; a bare
// number is read as SECONDS). A gift appended adds PERGIFT to SECONDS,
// keeping the key's TTL, so that gifts accepted between two publications
// of the leader count against the bound at once; the leader's next
// publication replaces the sum with its own count. An absent key (nothing
// backed up, or its leader gone) is 0 and is not created.
//
// With a WAIT following, a duplicate rewrites its order record unchanged
// (KEEPTTL): WAIT counts replicas that have this connection's last write,
// and without a write of its own a retry's WAIT would vouch for nothing —
// not for the first append, which an earlier, failed WAIT left in doubt.
// The rewrite comes after that append in the replication stream, so a
// replica that has it has the gift.
//
// An empty record is not an entry id: it is a reservation left by the
// Reserve/Commit order book this replaced (a rolling upgrade), treated as
// absent rather than answered as a duplicate with no id.
var appendGiftScript = redis.NewScript(appendGiftScriptSource)

const appendGiftScriptSource = `
local id = redis.call('GET', KEYS[2])
if id and id ~= '' then
	if ARGV[4] == '1' then
		redis.call('SET', KEYS[2], id, 'KEEPTTL')
	end
	return {id, 1, redis.call('GET', KEYS[4]) or ''}
end
if ARGV[4] == '1' then
	local online = 0
	for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do
		online = online + 1
	end
	if online < tonumber(ARGV[7]) then
		return {'', 3, tostring(online)}
	end
end
local raw = redis.call('GET', KEYS[3])
local sec, per, perText = 0, 0, nil
if raw then
	local secText
	secText, perText = string.match(raw, '^(%S+) (%S+)$')
	sec, per = tonumber(secText or raw) or 0, perText and tonumber(perText) or 0
	if sec > tonumber(ARGV[5]) then
		return {'', 2, string.format('%.6f', sec)}
	end
end
id = redis.call('XADD', KEYS[1], '*', 'm', ARGV[1], 'o', ARGV[2])
redis.call('SET', KEYS[2], id, 'PX', ARGV[3])
redis.call('SET', KEYS[4], ARGV[6], 'PX', ARGV[3])
if per > 0 then
	redis.call('SET', KEYS[3], string.format('%.6f %s', sec + per, perText), 'KEEPTTL')
end
return {id, 0}
`

// SetBacklogBound replaces RedisGiftLogConfig.BacklogBound, for a gift log
// built before what knows the rooms' settings (the event directory). Safe
// to call while gifts are appended.
func (l *RedisGiftLog) SetBacklogBound(f func(room string) float64) { l.bound.set(f) }

// AppendGift implements GiftLog.
func (l *RedisGiftLog) AppendGift(ctx context.Context, room, orderID string, m wire.Message) (string, bool, error) {
	if err := checkGift(room, orderID); err != nil {
		return "", false, err
	}
	fail := func(err error) (string, bool, error) {
		return "", false, fmt.Errorf("ingest: append gift %s/%s: %w", room, orderID, err)
	}
	b, err := encodeEntry(m)
	if err != nil {
		return fail(err)
	}
	if err := l.claimRoom(ctx, room, orderID); err != nil {
		if errors.Is(err, ErrOrderConflict) {
			return "", false, err
		}
		return fail(err)
	}
	terms, err := json.Marshal(termsOf(&m))
	if err != nil {
		return fail(err)
	}
	keys := []string{l.streams.StreamKey(stream.Key{Room: room, Lane: stream.Live}), orderKey(room, orderID), giftBacklogKey(room), orderTermsKey(room, orderID)}
	bound := l.bound.of(room)
	// Lua reads the bound with tonumber, which knows no infinity: an
	// unbounded room gets the largest finite bound instead.
	boundArg := strconv.FormatFloat(min(bound, math.MaxFloat64), 'g', -1, 64)
	var res []any
	if l.waitReplicas > 0 {
		res, err = l.runAndWait(ctx, keys, b, orderID, l.ttlMs, "1", boundArg, terms, l.waitReplicas)
	} else {
		res, err = appendGiftScript.Run(ctx, l.client, keys, b, orderID, l.ttlMs, "0", boundArg, terms, 0).Slice()
	}
	if err != nil {
		return fail(err)
	}
	a, err := parseAppendGift(res)
	if err != nil {
		return fail(err)
	}
	if a.refused {
		return "", false, backlogRefusal(room, a.backlog, bound)
	}
	if a.dup && a.terms != "" {
		var first GiftTerms
		if err := json.Unmarshal([]byte(a.terms), &first); err != nil {
			return fail(fmt.Errorf("terms of the first gift: %w", err))
		}
		if err := checkTerms(room, orderID, a.id, first, &m); err != nil {
			return "", false, err
		}
	}
	l.rooms.register(ctx, room)
	return a.id, a.dup, nil
}

// runAndWait runs the gift script and then WAIT on one connection to the
// one server that holds the room: WAIT counts the replicas that
// acknowledged its own connection's writes, so it must follow the script on
// the same connection — which a Cluster client's routing does not give
// (WAIT has no key). WAIT is sent only after a script that wrote: a
// refusal (the backlog, no replica online) has nothing for it to vouch for,
// and a WAIT after it would hold the connection for WaitTimeout — at a
// failover's retry rate, enough to starve the pool the barrage shares. A
// script that did not run (MOVED: the slot map is being re-read; NOSCRIPT:
// a node that has not cached it) is sent again; the script is safe to run
// twice anyway, by its order key.
func (l *RedisGiftLog) runAndWait(ctx context.Context, keys []string, args ...any) ([]any, error) {
	cc, cluster := l.client.(*redis.ClusterClient)
	evalsha := true
	var err error
	for attempt := 1; ; attempt++ {
		var node *redis.Client
		if cluster {
			if node, err = cc.MasterForKey(ctx, keys[0]); err != nil {
				return nil, err
			}
		} else {
			node = l.client.(*redis.Client) // NewRedisGiftLog checked
		}
		conn := node.Conn()
		var res []any
		if evalsha {
			res, err = conn.EvalSha(ctx, appendGiftScript.Hash(), keys, args...).Slice()
		} else {
			res, err = conn.Eval(ctx, appendGiftScriptSource, keys, args...).Slice()
		}
		var n int64
		var werr error
		wrote := err == nil && !refused(res) && !replicasOffline(res)
		if wrote {
			n, werr = conn.Do(ctx, "wait", l.waitReplicas, l.waitTimeout.Milliseconds()).Int64()
		}
		_ = conn.Close() // back to the pool (a broken one is dropped)
		switch {
		case err == nil && refused(res):
			// Nothing was written, and a refusal must not turn into a
			// 503.
			return res, nil
		case err == nil && replicasOffline(res):
			return nil, fmt.Errorf("%w (%v of %d)", ErrReplicasOffline, res[2], l.waitReplicas)
		case err == nil:
			if werr != nil {
				return nil, fmt.Errorf("WAIT: %w", werr)
			}
			if n < int64(l.waitReplicas) {
				return nil, fmt.Errorf("%w (%d of %d within %v)", ErrNotReplicated, n, l.waitReplicas, l.waitTimeout)
			}
			return res, nil
		case attempt >= maxGiftAttempts:
			return nil, err
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			evalsha = false
		case cluster && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")):
			// The node that answered is not (or no longer) the slot's
			// master: re-read the map and try where it says now. (ASK,
			// a slot in migration, is answered again until the
			// migration ends; then the caller's retry succeeds.)
			cc.ReloadState(ctx)
			if clock.Sleep(ctx, l.timers, time.Duration(attempt)*50*time.Millisecond) != nil {
				return nil, err
			}
		default:
			if cluster && staleMap(err) {
				// The script went to a node client, past the cluster
				// client's own hooks (redisx re-reads the map after such
				// failures): without this, a killed master's rooms would
				// wait for go-redis's periodic refresh, a minute.
				cc.ReloadState(ctx)
			}
			return nil, err
		}
	}
}

// staleMap reports whether err may mean that the slot map is stale: no
// answer from the node (dead, unreachable, a timeout) or CLUSTERDOWN.
func staleMap(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return redis.HasErrorPrefix(err, "CLUSTERDOWN")
	}
	return true
}

// encodeEntry encodes m as stream.RedisStore stores it in an entry's "m"
// field, so that its readers decode gifts like any other entry: msgpack with
// compact ints, without the id (the entry id replaces it) and without the
// order (wire.Message leaves it out; it goes in field "o").
func encodeEntry(m wire.Message) ([]byte, error) {
	m.ID = ""
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(&m); err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	return buf.Bytes(), nil
}

// giftAnswer is the gift script's answer: an entry id (dup: of an earlier
// append, with its terms, "" if unknown), or a refusal with the backlog
// that caused it.
type giftAnswer struct {
	id      string
	dup     bool
	terms   string
	refused bool
	backlog float64
}

// refused reports whether res is the script's backlog refusal.
func refused(res []any) bool {
	if len(res) != 3 {
		return false
	}
	flag, ok := res[1].(int64)
	return ok && flag == 2
}

// replicasOffline reports whether res is the script's refusal of a new
// order for want of online replicas.
func replicasOffline(res []any) bool {
	if len(res) != 3 {
		return false
	}
	flag, ok := res[1].(int64)
	return ok && flag == 3
}

func parseAppendGift(res []any) (giftAnswer, error) {
	switch len(res) {
	case 2:
		id, ok1 := res[0].(string)
		flag, ok2 := res[1].(int64)
		if ok1 && ok2 && id != "" && flag == 0 {
			return giftAnswer{id: id}, nil
		}
	case 3:
		raw, ok := res[2].(string)
		if refused(res) && ok {
			if b, err := strconv.ParseFloat(raw, 64); err == nil {
				return giftAnswer{refused: true, backlog: b}, nil
			}
		}
		id, ok1 := res[0].(string)
		flag, ok2 := res[1].(int64)
		if ok && ok1 && ok2 && id != "" && flag == 1 {
			return giftAnswer{id: id, dup: true, terms: raw}, nil
		}
	}
	return giftAnswer{}, fmt.Errorf("unexpected script answer %v", res)
}
