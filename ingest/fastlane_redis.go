package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

var _ FastLane = (*RedisFastLane)(nil)

// fastLaneTTL is how long a room's counter outlives its last write: past
// its second it is only read to be replaced, so two seconds cover a clock
// that is a little behind and then it costs no memory.
const fastLaneTTL = 2 * time.Second

// RedisFastLaneConfig configures a RedisFastLane.
type RedisFastLaneConfig struct {
	// Client talks to the Redis that holds Streams. Required; never closed
	// by the fast lane.
	Client redis.UniversalClient
	// Streams is the stream store the slicer and edge read: the fast lane
	// writes its lanes with its key layout and entry encoding, and
	// registers rooms through it. Required.
	Streams *stream.RedisStore
	// Clock times room registration and nothing else: the cap counts
	// seconds of Redis's clock. Nil: the real clock.
	Clock clock.Clock
	// Logger receives registration warnings. Nil: slog.Default().
	Logger *slog.Logger
}

// RedisFastLane is the FastLane shared by every ingest node. One Lua
// script reads Redis's clock, checks and bumps the room's counter of that
// second and appends the message, so the cap holds across nodes and the
// counted second is the one the entry id is stamped in.
//
// The counter sits beside the room's streams, under its hash tag, so the
// script's keys share a Redis Cluster slot:
//
//	danmaku:{room:ID}:barrage|live   the lane (stream.RedisStore's key)
//	danmaku:{room:ID}:fastlane       hash: s (unix second of Redis's TIME), n (shown in it)
//
// A counter whose second has passed is replaced, not decremented, so a
// Redis clock stepping back lets at most one more cap through. The script
// is sent at most once (no go-redis resend after a timeout): an XADD is not
// idempotent, and a duplicate announcement is worse than a 503 the sender
// retries.
type RedisFastLane struct {
	client  redis.UniversalClient
	streams *stream.RedisStore
	rooms   registrar
}

// NewRedisFastLane checks cfg and returns the fast lane. It sends nothing
// to Redis.
func NewRedisFastLane(cfg RedisFastLaneConfig) (*RedisFastLane, error) {
	if cfg.Client == nil || cfg.Streams == nil {
		return nil, errors.New("ingest: redis fast lane: Client and Streams are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RedisFastLane{
		client: cfg.Client, streams: cfg.Streams,
		rooms: registrar{streams: cfg.Streams, every: defaultGiftRegisterEvery, clock: clock.Or(cfg.Clock), log: cfg.Logger},
	}, nil
}

// fastLaneScript is the fast lane's one step.
//
// KEYS[1] the room's counter; KEYS[2] the lane's stream. ARGV[1] the cap;
// ARGV[2] the counter's TTL (ms); ARGV[3] the entry (field "m"). Returns
// {1, entry id}, or {0, µs until the next second} over the cap.
const fastLaneScriptSource = `
local t = redis.call('TIME')
local sec = tonumber(t[1])
local v = redis.call('HMGET', KEYS[1], 's', 'n')
local n = 0
if tonumber(v[1]) == sec then
	n = tonumber(v[2]) or 0
end
if n >= tonumber(ARGV[1]) then
	return {0, 1000000 - tonumber(t[2])}
end
local id = redis.call('XADD', KEYS[2], '*', 'm', ARGV[3])
redis.call('HSET', KEYS[1], 's', sec, 'n', n + 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, id}
`

var fastLaneScript = redis.NewScript(fastLaneScriptSource)

// Show implements FastLane.
func (f *RedisFastLane) Show(ctx context.Context, room string, lane stream.Lane, m wire.Message, capPerSec int) (Shown, error) {
	if err := checkShow(room, lane, capPerSec); err != nil {
		return Shown{}, err
	}
	fail := func(err error) (Shown, error) {
		return Shown{}, fmt.Errorf("ingest: fast lane %s/%s: %w", room, lane, err)
	}
	e, err := encodeEntry(m)
	if err != nil {
		return fail(err)
	}
	keys := []string{redisx.RoomKey(room, "fastlane"), f.streams.StreamKey(stream.Key{Room: room, Lane: lane})}
	res, err := runOnce(ctx, f.client, fastLaneScript, fastLaneScriptSource, keys, capPerSec, fastLaneTTL.Milliseconds(), e)
	if err != nil {
		return fail(err)
	}
	out, ok := res.([]any)
	if !ok || len(out) != 2 {
		return fail(fmt.Errorf("unexpected script answer %v", res))
	}
	switch flag, _ := out[0].(int64); flag {
	case 1:
		id, _ := out[1].(string)
		if id == "" {
			return fail(fmt.Errorf("unexpected script answer %v", res))
		}
		f.rooms.register(ctx, room)
		return Shown{ID: id}, nil
	case 0:
		us, _ := out[1].(int64)
		if us <= 0 || us > 1_000_000 {
			us = 1_000_000
		}
		return Shown{RetryAfter: time.Duration(us) * time.Microsecond}, nil
	}
	return fail(fmt.Errorf("unexpected script answer %v", res))
}

// onceCmd is a command go-redis must not send again once it may have
// reached Redis (see stream.RedisStore's xaddOnce): a Cluster client still
// follows MOVED and ASK, which a node answers instead of running it.
type onceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }

// runOnce runs a script that must not run twice: EVALSHA, then EVAL if the
// server has not cached it (NOSCRIPT: it did not run), each sent at most
// once.
func runOnce(ctx context.Context, c redis.UniversalClient, s *redis.Script, src string, keys []string, args ...any) (any, error) {
	run := func(cmdName, body string) (any, error) {
		a := make([]any, 0, 3+len(keys)+len(args))
		a = append(a, cmdName, body, len(keys))
		for _, k := range keys {
			a = append(a, k)
		}
		a = append(a, args...)
		cmd := redis.NewCmd(ctx, a...)
		_ = c.Process(ctx, onceCmd{cmd})
		return cmd.Result()
	}
	res, err := run("evalsha", s.Hash())
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return run("eval", src)
	}
	return res, err
}
