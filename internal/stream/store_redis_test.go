package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/stream/streamtest"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
)

// redisClient starts a Redis server for t and returns a client of it.
// contextTimeout sets the client's ContextTimeoutEnabled, which production
// clients should set; the store must not depend on it.
func redisClient(t testing.TB, contextTimeout bool) *redis.Client {
	t.Helper()
	addr := testenv.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: contextTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient returns a client of the test binary's shared Redis Cluster,
// emptied for t, with the go-redis defaults but for contextTimeout (as
// redisClient).
func clusterClient(t testing.TB, contextTimeout bool) *redis.ClusterClient {
	t.Helper()
	cl := testenv.SharedRedisCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: contextTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

// redisKind is a Redis deployment the store's Redis tests run against.
type redisKind struct {
	name   string
	client func(t testing.TB, contextTimeout bool) redis.UniversalClient
}

func redisKinds() []redisKind {
	return []redisKind{
		{"redis", func(t testing.TB, ct bool) redis.UniversalClient { return redisClient(t, ct) }},
		{"redis-cluster", func(t testing.TB, ct bool) redis.UniversalClient { return clusterClient(t, ct) }},
	}
}

// forEachRedis runs test once on one Redis server and once on the shared
// cluster, as subtests named after the kind, with a client that has
// ContextTimeoutEnabled.
func forEachRedis(t *testing.T, test func(t *testing.T, c redis.UniversalClient)) {
	for _, k := range redisKinds() {
		t.Run(k.name, func(t *testing.T) { test(t, k.client(t, true)) })
	}
}

// allKeys returns the keys matching pattern: KEYS on a server, KEYS on
// every master of a cluster (each answers only for its own slots).
func allKeys(t *testing.T, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		keys, err := c.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	var (
		mu  sync.Mutex
		all []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

var prefixSeq atomic.Uint64

// newRedisStore returns a store on c under a key prefix no other store of the
// test binary uses, so that tests sharing a server share no keys.
func newRedisStore(t testing.TB, c redis.UniversalClient, edit func(*stream.RedisConfig)) *stream.RedisStore {
	t.Helper()
	cfg := stream.RedisConfig{
		Client: c,
		Prefix: fmt.Sprintf("test%d", prefixSeq.Add(1)),
		Logger: slog.New(slog.DiscardHandler),
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := stream.NewRedisStore(cfg)
	if err != nil {
		t.Fatalf("NewRedisStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestRedisStore(t *testing.T) {
	c := redisClient(t, true)
	streamtest.Run(t, func(t *testing.T, _ *clock.Fake) stream.Store {
		return newRedisStore(t, c, nil)
	})
}

// TestRedisClusterStore runs the conformance suite on a Redis Cluster: a
// room's two streams share its slot, the rooms registry lives in another
// (on another master, for most rooms), and the store's pipelines and
// scripts must work across them. Each subtest has its own key prefix.
func TestRedisClusterStore(t *testing.T) {
	c := clusterClient(t, true)
	streamtest.Run(t, func(t *testing.T, _ *clock.Fake) stream.Store {
		return newRedisStore(t, c, nil)
	})
}

func TestNewRedisStoreConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { c.Close() })
	tests := []struct {
		name    string
		cfg     stream.RedisConfig
		wantErr bool
		key     string
	}{
		{"defaults", stream.RedisConfig{Client: c}, false, "danmaku:{room:r1}:live"},
		{"prefix", stream.RedisConfig{Client: c, Prefix: "ev42:danmaku"}, false, "ev42:danmaku:{room:r1}:live"},
		{"no client", stream.RedisConfig{}, true, ""},
		{"hash tag in prefix", stream.RedisConfig{Client: c, Prefix: "{x}"}, true, ""},
		{"brace in prefix", stream.RedisConfig{Client: c, Prefix: "a}"}, true, ""},
		{"negative step", stream.RedisConfig{Client: c, BlockStep: -time.Second}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := stream.NewRedisStore(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := s.StreamKey(stream.Key{Room: "r1", Lane: stream.Live}); got != tt.key {
				t.Errorf("StreamKey = %q, want %q", got, tt.key)
			}
			if tt.cfg.Prefix == "" {
				// The default layout is the one every Redis backend shares.
				if got, want := s.StreamKey(stream.Key{Room: "r1", Lane: stream.Barrage}), redisx.RoomKey("r1", "barrage"); got != want {
					t.Errorf("default StreamKey = %q, want redisx.RoomKey's %q", got, want)
				}
			}
		})
	}
}

// hashTag returns the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, if that is not empty; else the key.
func hashTag(key string) string {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return key
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return key
	}
	return tag
}

func TestRedisKeysShareRoomHashTag(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		s := newRedisStore(t, c, nil)
		ctx := context.Background()
		rooms := []string{"r1", "concert-2025", "room_9", "A"}
		for _, room := range rooms {
			for _, lane := range []stream.Lane{stream.Barrage, stream.Live} {
				k := stream.Key{Room: room, Lane: lane}
				if got, want := hashTag(s.StreamKey(k)), "room:"+room; got != want {
					t.Errorf("key %q hashes %q, want %q", s.StreamKey(k), got, want)
				}
				if _, err := s.Append(ctx, k, []wire.Message{{Kind: wire.KindBarrage, Text: "x"}}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.ReadGroup(ctx, k, "g", "c", 0, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.OpenRoom(ctx, "opened-only"); err != nil {
			t.Fatal(err)
		}
		// Every key the store wrote: the registry, and streams tagged by room.
		prefix := strings.TrimSuffix(s.RoomsKey(), "rooms")
		keys := allKeys(t, c, prefix+"*")
		if len(keys) != 2*len(rooms)+1 {
			t.Errorf("store wrote keys %v, want %d", keys, 2*len(rooms)+1)
		}
		for _, k := range keys {
			if k == s.RoomsKey() {
				if hashTag(k) != k {
					t.Errorf("registry key %q has a hash tag", k)
				}
				continue
			}
			room, _, _ := strings.Cut(strings.TrimPrefix(k, prefix+"{room:"), "}")
			if hashTag(k) != "room:"+room {
				t.Errorf("key %q: hash tag %q, want room:%s", k, hashTag(k), room)
			}
		}
	})
}

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestRedisCorruptEntrySkippedAndAcked(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		var logs syncBuffer
		s := newRedisStore(t, c, func(cfg *stream.RedisConfig) {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		ctx := context.Background()
		key := stream.Key{Room: "r", Lane: stream.Live}
		sk := s.StreamKey(key)

		good, err := msgpack.Marshal(&wire.Message{Kind: wire.KindGift, Gift: "rocket", Merged: []string{"1-0", "2-0"}})
		if err != nil {
			t.Fatal(err)
		}
		corrupt := []map[string]any{
			{"m": "\xc1"},                            // a byte msgpack never uses
			{"m": string(good[:len(good)/2])},        // cut short
			{"m": "\x81\xa3ids\xdd\x7f\xff\xff\xff"}, // claims 2^31 merged ids it does not hold
			{"x": "not ours"},                        // no message field
		}
		first, err := s.Append(ctx, key, []wire.Message{{Kind: wire.KindGift, Gift: "heart"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range corrupt {
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: sk, Values: v}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		last, err := s.Append(ctx, key, []wire.Message{{Kind: wire.KindSystem, Text: "公告"}})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{first[0].ID, last[0].ID}

		got, err := s.ReadGroup(ctx, key, "g", "c", 0, 0)
		if err != nil {
			t.Fatalf("ReadGroup: %v", err)
		}
		if ids := idsOf(got); !equalIDs(ids, want) {
			t.Fatalf("ReadGroup = %v, want %v", ids, want)
		}
		if n := s.Corrupt(); n != uint64(len(corrupt)) {
			t.Errorf("Corrupt() = %d, want %d", n, len(corrupt))
		}
		if n := strings.Count(logs.String(), "corrupt entry"); n != len(corrupt) {
			t.Errorf("logged %d corrupt entries, want %d:\n%s", n, len(corrupt), logs.String())
		}
		// The corrupt entries were acknowledged: only the good ones are pending,
		// and nothing is delivered again.
		pending, err := c.XPending(ctx, sk, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		if pending.Count != int64(len(want)) {
			t.Errorf("%d entries pending, want %d", pending.Count, len(want))
		}
		if got, err := s.ReadGroup(ctx, key, "g", "c", 0, 0); err != nil || len(got) != 0 {
			t.Errorf("second ReadGroup = %v, %v; want nothing", idsOf(got), err)
		}
		claimed, err := s.Claim(ctx, key, "g", "c2", 0, 0)
		if err != nil || !equalIDs(idsOf(claimed), want) {
			t.Errorf("Claim = %v, %v; want %v", idsOf(claimed), err, want)
		}
		// A plain read skips them too (and has nothing to acknowledge).
		read, err := s.Read(ctx, key, "0", 0, 0)
		if err != nil || !equalIDs(idsOf(read), want) {
			t.Errorf("Read = %v, %v; want %v", idsOf(read), err, want)
		}

		// A batch of nothing but corrupt entries does not end a read early: the
		// reader reads on past them.
		key2 := stream.Key{Room: "r2", Lane: stream.Live}
		for _, v := range corrupt {
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: s.StreamKey(key2), Values: v}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		after, err := s.Append(ctx, key2, []wire.Message{{Kind: wire.KindGift, Gift: "heart"}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.ReadGroup(ctx, key2, "g", "c", 2, 0); err != nil || !equalIDs(idsOf(got), idsOf(after)) {
			t.Errorf("ReadGroup past corrupt entries = %v, %v; want %v", idsOf(got), err, idsOf(after))
		}
		if got, err := s.Read(ctx, key2, "0", 2, 0); err != nil || !equalIDs(idsOf(got), idsOf(after)) {
			t.Errorf("Read past corrupt entries = %v, %v; want %v", idsOf(got), err, idsOf(after))
		}
	})
}

func TestRedisOrderIDRoundTrip(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		s := newRedisStore(t, c, nil)
		ctx := context.Background()
		key := stream.Key{Room: "r", Lane: stream.Live}
		const order = "order-7f3a9"
		in := []wire.Message{
			{Kind: wire.KindGift, User: "u1", Gift: "rocket", Value: 50000, Count: 2, Order: order},
			{Kind: wire.KindSystem, Text: "公告", Role: "host"},
		}
		out, err := s.Append(ctx, key, in)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Order != order {
			t.Fatalf("Append returned Order %q", out[0].Order)
		}
		// Stored beside the message, not inside its msgpack (whose tags leave it
		// out), and only when set.
		raw, err := c.XRange(ctx, s.StreamKey(key), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := raw[0].Values["o"]; got != order {
			t.Errorf("field o = %v, want %q", got, order)
		}
		if m, _ := raw[0].Values["m"].(string); strings.Contains(m, order) {
			t.Error("the order id is inside the message field")
		}
		if _, ok := raw[1].Values["o"]; ok {
			t.Error("a message without an order id has field o")
		}
		check := func(what string, es []stream.Entry, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if len(es) != 2 || es[0].Order != order || es[1].Order != "" || es[0].ID != out[0].ID {
				t.Errorf("%s = %+v, want order %q on %s only", what, es, order, out[0].ID)
			}
		}
		es, err := s.Read(ctx, key, "", 0, 0)
		check("Read", es, err)
		es, err = s.ReadGroup(ctx, key, "g", "c", 0, 0)
		check("ReadGroup", es, err)
		es, err = s.Claim(ctx, key, "g", "c2", 0, 0)
		check("Claim", es, err)
	})
}

// countHook counts the commands a client sends and how they are grouped.
type countHook struct {
	single    atomic.Int64
	mu        sync.Mutex
	pipelines [][]string // command names of each pipeline
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		h.mu.Lock()
		h.pipelines = append(h.pipelines, names)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *countHook) take() (single int64, pipelines [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pipelines, h.pipelines = h.pipelines, nil
	return h.single.Swap(0), pipelines
}

func TestRedisAppendIsOneRoundTrip(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		// Connect before counting: go-redis sends setup commands (HELLO, CLIENT
		// SETINFO) on each new connection, and pipelines have a pool of their own.
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		h := &countHook{}
		c.AddHook(h)
		s := newRedisStore(t, c, nil)
		key := stream.Key{Room: "r", Lane: stream.Barrage}
		msgs := make([]wire.Message, 1000)
		for i := range msgs {
			msgs[i] = wire.Message{Kind: wire.KindBarrage, User: fmt.Sprint("u", i), Text: fmt.Sprint("弹幕 ", i)}
		}
		for round, wantExtra := range []string{"eval", ""} { // the first append registers the room
			out, err := s.Append(ctx, key, msgs)
			if err != nil {
				t.Fatal(err)
			}
			single, pipes := h.take()
			if single != 0 || len(pipes) != 1 {
				t.Fatalf("round %d: Append of %d sent %d single commands and %d pipelines (%v); want one pipeline",
					round, len(msgs), single, len(pipes), pipeHeads(pipes))
			}
			counts := map[string]int{}
			for _, name := range pipes[0] {
				counts[name]++
			}
			want := map[string]int{"xadd": len(msgs)}
			if wantExtra != "" {
				want[wantExtra] = 1
			}
			if fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Errorf("round %d: pipeline held %v, want %v", round, counts, want)
			}
			for i := 1; i < len(out); i++ {
				if wire.CompareIDs(out[i-1].ID, out[i].ID) >= 0 {
					t.Fatalf("ids out of order: %s then %s", out[i-1].ID, out[i].ID)
				}
			}
		}
		if n, err := c.XLen(ctx, s.StreamKey(key)).Result(); err != nil || n != 2000 {
			t.Fatalf("XLEN = %d, %v; want 2000", n, err)
		}
	})
}

func TestRedisCancelUnblocks(t *testing.T) {
	for _, k := range redisKinds() {
		for _, contextTimeout := range []bool{false, true} {
			t.Run(fmt.Sprint(k.name, "/ContextTimeoutEnabled=", contextTimeout), func(t *testing.T) {
				c := k.client(t, contextTimeout)
				s := newRedisStore(t, c, func(cfg *stream.RedisConfig) { cfg.BlockStep = 200 * time.Millisecond })
				key := stream.Key{Room: "r", Lane: stream.Live}
				const block = time.Minute
				reads := map[string]func(ctx context.Context) error{
					"Read": func(ctx context.Context) error {
						_, err := s.Read(ctx, key, "$", 10, block)
						return err
					},
					"ReadGroup": func(ctx context.Context) error {
						_, err := s.ReadGroup(ctx, key, "g", "c", 10, block)
						return err
					},
				}
				for name, read := range reads {
					t.Run(name+"/cancel", func(t *testing.T) {
						ctx, cancel := context.WithCancel(context.Background())
						ch := make(chan error, 1)
						go func() { ch <- read(ctx) }()
						time.Sleep(50 * time.Millisecond)
						cancel()
						expectUnblocked(t, ch, context.Canceled)
					})
					t.Run(name+"/deadline", func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
						defer cancel()
						ch := make(chan error, 1)
						go func() { ch <- read(ctx) }()
						expectUnblocked(t, ch, context.DeadlineExceeded)
					})
				}
				// The client is still usable after all that.
				if _, err := s.Append(context.Background(), key, []wire.Message{{Kind: wire.KindGift}}); err != nil {
					t.Fatalf("Append after cancelled reads: %v", err)
				}
			})
		}
	}
}

func expectUnblocked(t *testing.T, ch <-chan error, want error) {
	t.Helper()
	select {
	case err := <-ch:
		if !errors.Is(err, want) {
			t.Fatalf("err = %v, want %v", err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocked read never returned")
	}
}

func TestRedisClose(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		s := newRedisStore(t, c, nil)
		ctx := context.Background()
		key := stream.Key{Room: "r", Lane: stream.Live}
		ch := make(chan error, 1)
		go func() {
			_, err := s.ReadGroup(ctx, key, "g", "c", 10, time.Minute)
			ch <- err
		}()
		time.Sleep(50 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		expectUnblocked(t, ch, stream.ErrClosed)
		if _, err := s.Append(ctx, key, []wire.Message{{Kind: wire.KindGift}}); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Append after Close: %v", err)
		}
		if _, err := s.Rooms(ctx); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Rooms after Close: %v", err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Errorf("Close closed the caller's client: %v", err)
		}
	})
}

// TestRedisLastIDAfterTrimmingAll: a stream trimmed to nothing still answers
// the id that ids continue from, as the memory store does.
func TestRedisLastIDAfterTrimmingAll(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		s := newRedisStore(t, c, nil)
		ctx := context.Background()
		key := stream.Key{Room: "r", Lane: stream.Barrage}
		out, err := s.Append(ctx, key, make([]wire.Message, 3))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.TrimBefore(ctx, key, wire.FormatID(1<<62, 0)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.LastID(ctx, key); err != nil || got != out[2].ID {
			t.Fatalf("LastID after trimming all = %q, %v; want %q", got, err, out[2].ID)
		}
	})
}

// TestRedisClaimDeletedEntries: an entry deleted while pending is neither
// returned nor left pending.
func TestRedisClaimDeletedEntries(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		s := newRedisStore(t, c, nil)
		ctx := context.Background()
		key := stream.Key{Room: "r", Lane: stream.Live}
		out, err := s.Append(ctx, key, []wire.Message{{Kind: wire.KindGift}, {Kind: wire.KindGift}, {Kind: wire.KindGift}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadGroup(ctx, key, "g", "c1", 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.XDel(ctx, s.StreamKey(key), out[1].ID).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.Claim(ctx, key, "g", "c2", 0, 0)
		if want := []string{out[0].ID, out[2].ID}; err != nil || !equalIDs(idsOf(got), want) {
			t.Fatalf("Claim = %v, %v; want %v", idsOf(got), err, want)
		}
		pending, err := c.XPending(ctx, s.StreamKey(key), "g").Result()
		if err != nil || pending.Count != 2 {
			t.Fatalf("pending after claim = %+v, %v; want 2", pending, err)
		}
	})
}

// TestRedisServerLosesEverything stands in for a Redis restart without
// persistence (testenv has no restart helper): the data is flushed under
// blocked readers, then every connection of the store is killed. Blocked
// readers carry on (a group reader recreates its group) and receive what is
// appended afterwards, and appending processes rebuild the rooms registry
// within RegisterEvery.
func TestRedisServerLosesEverything(t *testing.T) {
	c := redisClient(t, true)
	admin := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
	t.Cleanup(func() { admin.Close() })
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newRedisStore(t, c, func(cfg *stream.RedisConfig) {
		cfg.Clock = clk
		cfg.RegisterEvery = time.Minute
	})
	ctx := context.Background()
	key := stream.Key{Room: "r", Lane: stream.Live}
	appendGift := func() []wire.Message {
		t.Helper()
		var err error
		for range 3 { // a killed connection may fail one call
			var out []wire.Message
			if out, err = s.Append(ctx, key, []wire.Message{{Kind: wire.KindGift, Gift: "rocket"}}); err == nil {
				return out
			}
		}
		t.Fatalf("Append: %v", err)
		return nil
	}
	type res struct {
		es  []stream.Entry
		err error
	}
	// blocked starts a group read and a plain read that block until an
	// append.
	blocked := func(after string) (group, plain chan res) {
		group, plain = make(chan res, 1), make(chan res, 1)
		go func() {
			es, err := s.ReadGroup(ctx, key, "g", "c", 10, 20*time.Second)
			group <- res{es, err}
		}()
		go func() {
			es, err := s.Read(ctx, key, after, 10, 20*time.Second)
			plain <- res{es, err}
		}()
		time.Sleep(50 * time.Millisecond) // let them block; correctness does not depend on it
		return group, plain
	}
	await := func(what string, ch <-chan res) res {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the blocked read never returned", what)
			return res{}
		}
	}

	last := appendGift()[0].ID
	if _, err := s.ReadGroup(ctx, key, "g", "c", 0, 0); err != nil {
		t.Fatal(err)
	}

	// The data goes: Redis answers the blocked group read UNBLOCKED, and the
	// store reads on.
	group, plain := blocked(last)
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	want := appendGift()
	for what, ch := range map[string]chan res{"ReadGroup": group, "Read": plain} {
		if r := await(what, ch); r.err != nil || !equalIDs(idsOf(r.es), idsOf(want)) {
			t.Fatalf("%s blocked across FLUSHALL = %v, %v; want %v", what, idsOf(r.es), r.err, idsOf(want))
		}
	}

	// The connections go: a blocked read may fail; the next one works.
	last = want[0].ID
	group, plain = blocked(last)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	want = appendGift()
	for what, ch := range map[string]chan res{"ReadGroup": group, "Read": plain} {
		r := await(what, ch)
		if r.err != nil || len(r.es) == 0 {
			t.Logf("%s blocked across the connection kill: %v, %v", what, idsOf(r.es), r.err)
			if what == "ReadGroup" {
				r.es, r.err = s.ReadGroup(ctx, key, "g", "c", 10, 5*time.Second)
			} else {
				r.es, r.err = s.Read(ctx, key, last, 10, 5*time.Second)
			}
		}
		if r.err != nil || !equalIDs(idsOf(r.es), idsOf(want)) {
			t.Fatalf("%s after the connection kill = %v, %v; want %v", what, idsOf(r.es), r.err, idsOf(want))
		}
	}

	// The registry went with the data; the next append after RegisterEvery
	// rebuilds it.
	rooms, err := s.Rooms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rooms) != 0 {
		t.Fatalf("Rooms right after the loss = %v; the registry was flushed", rooms)
	}
	clk.Advance(time.Minute)
	appendGift()
	rooms, err = s.Rooms(ctx)
	if err != nil || len(rooms) != 1 || rooms[0].ID != "r" {
		t.Fatalf("Rooms after RegisterEvery = %v, %v; want room r again", rooms, err)
	}
}

func TestRedisRoomsKeepFirstOpen(t *testing.T) {
	forEachRedis(t, func(t *testing.T, c redis.UniversalClient) {
		s := newRedisStore(t, c, nil)
		ctx := context.Background()
		if err := c.HSet(ctx, s.RoomsKey(), "r", "1700000000123").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, s.RoomsKey(), "garbage", "yesterday").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.OpenRoom(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, stream.Key{Room: "r"}, make([]wire.Message, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.OpenRoom(ctx, "new"); err != nil {
			t.Fatal(err)
		}
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rooms, err := s.Rooms(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rooms) != 2 || rooms[0].ID != "new" || rooms[1].ID != "r" {
			t.Fatalf("Rooms = %v, want new and r, sorted, without the malformed one", rooms)
		}
		if !rooms[1].Opened.Equal(time.UnixMilli(1700000000123)) {
			t.Errorf("room r Opened = %v; the first open time was overwritten", rooms[1].Opened)
		}
		if d := now.Sub(rooms[0].Opened); d < 0 || d > time.Minute {
			t.Errorf("room new Opened = %v, Redis time now %v", rooms[0].Opened, now)
		}
	})
}

func idsOf(es []stream.Entry) []string {
	out := make([]string, len(es))
	for i := range es {
		out[i] = es[i].ID
	}
	return out
}

func equalIDs(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func pipeHeads(pipes [][]string) []string {
	var out []string
	for _, p := range pipes {
		head := p
		if len(head) > 3 {
			head = head[:3]
		}
		out = append(out, fmt.Sprintf("%d cmds %v", len(p), head))
	}
	return out
}

// busyScript keeps the Redis that runs it busy for ARGV[1] microseconds:
// a script blocks the whole server, which reads no other client meanwhile
// (it would answer BUSY only after busy-reply-threshold, 5 s). A command
// that arrives meanwhile waits in its socket and runs right after.
const busyScript = `local t0 = redis.call('TIME')
local start = t0[1] * 1000000 + t0[2]
while true do
	local t = redis.call('TIME')
	if t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1]) then return 1 end
end`

// TestRedisAppendNotResentAfterTimeout: an Append whose answer comes after
// the client's read timeout — Redis ran the XADDs, the client gave up — is
// not sent again by go-redis, whose ClusterClient otherwise resends a
// pipeline after a timeout or a broken connection (its MaxRedirects loop,
// which MaxRetries -1 does not turn off). The caller gets an ambiguous
// error and the messages are stored once, never twice.
func TestRedisAppendNotResentAfterTimeout(t *testing.T) {
	const ioTimeout = 300 * time.Millisecond
	for _, k := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return testenv.Redis(t) }},
		{"redis-cluster", func(t *testing.T) string { return testenv.SharedRedisCluster(t).URL() }},
	} {
		t.Run(k.name, func(t *testing.T) {
			url := k.url(t)
			ctx := context.Background()
			// As production connects: redisx.Connect.
			c, err := redisx.Connect(ctx, redisx.Config{URL: url, IOTimeout: ioTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			admin, err := redisx.Connect(ctx, redisx.Config{URL: url, IOTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Close() })
			s := newRedisStore(t, c, nil)
			key := stream.Key{Room: "slow", Lane: stream.Barrage}
			sk := s.StreamKey(key)
			// The room is registered first, so that the Append below is
			// XADDs alone.
			if err := s.OpenRoom(ctx, key.Room); err != nil {
				t.Fatal(err)
			}

			node := nodeOf(t, admin, sk)
			if err := node.Ping(ctx).Err(); err != nil { // connected before timing pings
				t.Fatal(err)
			}
			if err := s.OpenRoom(ctx, "warm-up"); err != nil { // and so is c
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, key, []wire.Message{{Kind: wire.KindBarrage, Text: "warm-up"}}); err != nil {
				t.Fatal(err)
			}

			// Keep the stream's node busy for three read timeouts: long
			// enough for go-redis to give up on the Append and try again
			// twice, each attempt queued behind the script. If the Append
			// happens to beat the script (a PING that was merely slow
			// looked like a busy node), the stall is tried again.
			msgs := []wire.Message{{Kind: wire.KindBarrage, Text: "a"}, {Kind: wire.KindBarrage, Text: "b"}, {Kind: wire.KindBarrage, Text: "c"}}
			for attempt := 1; ; attempt++ {
				before, err := admin.XLen(ctx, sk).Result()
				if err != nil {
					t.Fatal(err)
				}
				busy := make(chan error, 1)
				go func() {
					busy <- admin.Eval(ctx, busyScript, []string{sk}, (3 * ioTimeout).Microseconds()).Err()
				}()
				// The node is busy once a PING to it goes unanswered.
				for deadline := time.Now().Add(10 * time.Second); ; {
					pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
					err := node.Ping(pctx).Err()
					cancel()
					if err != nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the busy script never ran")
					}
				}
				_, appendErr := s.Append(ctx, key, msgs)
				if err := <-busy; err != nil {
					t.Fatalf("busy script: %v", err)
				}
				after, err := admin.XLen(ctx, sk).Result()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("Append across a stall: %v; it stored %d entries", appendErr, after-before)
				if after-before > int64(len(msgs)) {
					t.Fatalf("one Append of %d messages stored %d entries: go-redis sent the XADDs again", len(msgs), after-before)
				}
				if appendErr != nil {
					return // the stall was hit, and nothing was resent
				}
				if attempt == 3 {
					t.Fatal("the Append never ran into the stall")
				}
			}
		})
	}
}

// nodeOf returns a client of the one server that holds key: c itself, or
// the cluster master of key's slot.
func nodeOf(t *testing.T, c redis.UniversalClient, key string) *redis.Client {
	t.Helper()
	if cc, ok := c.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return c.(*redis.Client)
}

// TestRedisClusterAppendFollowsMoved: the XADDs that go-redis may not
// resend (xaddOnce) still follow MOVED, the answer of a node that does not
// serve the slot and so did not run them. The client here has a slot map
// that sends every slot to one master, as a map gone stale after a
// failover or a resharding does; every message is stored once.
func TestRedisClusterAppendFollowsMoved(t *testing.T) {
	cl := testenv.SharedRedisCluster(t)
	key := stream.Key{Room: "moved", Lane: stream.Barrage}
	owner := cl.MasterOf(t, "danmaku:{room:moved}:barrage")
	var wrong string
	for _, n := range cl.Nodes() {
		if r, err := n.Role(); err == nil && r == "master" && n != owner {
			wrong = n.Addr
			break
		}
	}
	if wrong == "" {
		t.Fatal("no other master")
	}
	stale := func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: wrong}}}}, nil
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: stale, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	moved := &movedHook{}
	c.OnNewNode(func(n *redis.Client) { n.AddHook(moved) })
	s := newRedisStore(t, c, func(cfg *stream.RedisConfig) { cfg.Prefix = "danmaku" })
	ctx := context.Background()
	out, err := s.Append(ctx, key, []wire.Message{{Kind: wire.KindBarrage, Text: "a"}, {Kind: wire.KindBarrage, Text: "b"}})
	if err != nil {
		t.Fatalf("Append through a stale slot map: %v", err)
	}
	if moved.count() == 0 {
		t.Fatal("no command was answered MOVED: the slot map was not stale")
	}
	admin := redistest.Dial(t, redisx.Config{URL: cl.URL()})
	if n, err := admin.XLen(ctx, s.StreamKey(key)).Result(); err != nil || n != 2 {
		t.Fatalf("XLEN = %d, %v; want the 2 messages once (ids %v)", n, err, out)
	}
}

// movedHook counts the commands a node client saw answered MOVED.
type movedHook struct{ n atomic.Int64 }

func (h *movedHook) count() int64 { return h.n.Load() }

func (h *movedHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *movedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if redis.HasErrorPrefix(cmd.Err(), "MOVED") {
			h.n.Add(1)
		}
		return err
	}
}

func (h *movedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if redis.HasErrorPrefix(c.Err(), "MOVED") {
				h.n.Add(1)
			}
		}
		return err
	}
}
