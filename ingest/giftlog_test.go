package ingest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
	"danmaku/slicer"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// giftBackend is one GiftLog implementation under test. open returns the
// stream store the gift logs append to, a constructor of gift logs over it
// with a given order TTL (0: the default), pass (as in stateBackend) and,
// for Redis, the client, to check the key layout.
type giftBackend struct {
	name string
	open func(t *testing.T) (streams stream.Store, newLog func(t *testing.T, ttl time.Duration) ingest.GiftLog, pass func(time.Duration), rdb redis.UniversalClient)
}

func giftBackends() []giftBackend {
	return []giftBackend{
		{"memory", func(t *testing.T) (stream.Store, func(*testing.T, time.Duration) ingest.GiftLog, func(time.Duration), redis.UniversalClient) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			store := stream.NewMemoryStore(c)
			return store, func(t *testing.T, ttl time.Duration) ingest.GiftLog {
				l, err := ingest.NewMemoryGiftLog(ingest.MemoryGiftLogConfig{Streams: store, OrderTTL: ttl, Clock: c})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}, c.Advance, nil
		}},
		{"redis", func(t *testing.T) (stream.Store, func(*testing.T, time.Duration) ingest.GiftLog, func(time.Duration), redis.UniversalClient) {
			rdb := redistest.Client(t)
			store := newRedisStore(t, rdb)
			return store, func(t *testing.T, ttl time.Duration) ingest.GiftLog {
				return newRedisGiftLog(t, rdb, store, ttl)
			}, time.Sleep, rdb
		}},
		{"redis-cluster", func(t *testing.T) (stream.Store, func(*testing.T, time.Duration) ingest.GiftLog, func(time.Duration), redis.UniversalClient) {
			rdb := redistest.Cluster(t)
			store := newRedisStore(t, rdb)
			return store, func(t *testing.T, ttl time.Duration) ingest.GiftLog {
				return newRedisGiftLog(t, rdb, store, ttl)
			}, time.Sleep, rdb
		}},
		// As above, confirming every gift only once a replica has it
		// (WAIT 1 after the script, on the master's connection).
		{"redis-cluster-wait", func(t *testing.T) (stream.Store, func(*testing.T, time.Duration) ingest.GiftLog, func(time.Duration), redis.UniversalClient) {
			rdb := redistest.Cluster(t)
			store := newRedisStore(t, rdb)
			return store, func(t *testing.T, ttl time.Duration) ingest.GiftLog {
				l, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: store, OrderTTL: ttl, Logger: quiet, WaitReplicas: 1})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}, time.Sleep, rdb
		}},
	}
}

func newRedisStore(t testing.TB, rdb redis.UniversalClient) *stream.RedisStore {
	t.Helper()
	s, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newRedisGiftLog(t *testing.T, rdb redis.UniversalClient, store *stream.RedisStore, ttl time.Duration) *ingest.RedisGiftLog {
	t.Helper()
	l, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: store, OrderTTL: ttl, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testGift is a gift with every field the stream keeps set, so that a field
// lost on the way shows.
func testGift(value int64) wire.Message {
	return wire.Message{
		Kind: wire.KindGift, Offset: 7, User: "u1", Nick: "Ann", Avatar: "a7", Text: "for you",
		Gift: "rocket", Value: value, Count: 3, Merged: []string{"1-0", "2-0"}, Role: "viewer",
	}
}

// TestGiftLogConformance runs every GiftLog implementation through the same
// cases. Each case uses its own rooms, so cases share one backend.
func TestGiftLogConformance(t *testing.T) {
	type env struct {
		streams stream.Store
		log     ingest.GiftLog
		newLog  func(t *testing.T, ttl time.Duration) ingest.GiftLog
		pass    func(time.Duration)
		rdb     redis.UniversalClient
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env)
	}{
		{"appends once, then answers the first id", func(t *testing.T, e env) {
			id := mustAppendGift(t, e.log, "once", "o1", testGift(100), false)
			// A retry appends nothing, its nickname or avatar changed or not
			// (they are only shown).
			renamed := testGift(100)
			renamed.Nick, renamed.Avatar, renamed.Text = "Anna", "a8", "again"
			for _, m := range []wire.Message{testGift(100), renamed} {
				if again := mustAppendGift(t, e.log, "once", "o1", m, true); again != id {
					t.Fatalf("duplicate answered id %s, want the first, %s", again, id)
				}
			}
			es := liveEntries(t, e.streams, "once")
			if len(es) != 1 || es[0].ID != id || es[0].Value != 100 {
				t.Fatalf("live lane holds %+v, want the one first gift %s", es, id)
			}
			if e.rdb != nil {
				ctx := context.Background()
				got, err := e.rdb.Get(ctx, "danmaku:{room:once}:order:o1").Result()
				if err != nil || got != id {
					t.Fatalf("order record = %q, %v; want %s under the room's hash tag", got, err, id)
				}
				if ttl, err := e.rdb.PTTL(ctx, "danmaku:{room:once}:order:o1").Result(); err != nil || ttl <= 23*time.Hour {
					t.Fatalf("order record PTTL = %v, %v; want the 24 h default", ttl, err)
				}
				terms, err := e.rdb.Get(ctx, "danmaku:{room:once}:orderterms:o1").Result()
				if want := `{"user":"u1","gift":"rocket","value":100,"count":3}`; err != nil || terms != want {
					t.Fatalf("order terms = %q, %v; want %s under the room's hash tag", terms, err, want)
				}
				if ttl, err := e.rdb.PTTL(ctx, "danmaku:{room:once}:orderterms:o1").Result(); err != nil || ttl <= 23*time.Hour {
					t.Fatalf("order terms PTTL = %v, %v; want the record's", ttl, err)
				}
				if n, err := e.rdb.XLen(ctx, "danmaku:{room:once}:live").Result(); err != nil || n != 1 {
					t.Fatalf("XLEN of the room's live stream = %d, %v; want 1", n, err)
				}
			}
		}},
		{"an order id reused for another gift is refused, naming what differs", func(t *testing.T, e env) {
			id := mustAppendGift(t, e.log, "reuse", "reuse-1", testGift(100), false)
			first := ingest.GiftTerms{User: "u1", Gift: "rocket", Value: 100, Count: 3}
			for _, c := range []struct {
				name   string
				mod    func(*wire.Message)
				fields []string
			}{
				{"another user", func(m *wire.Message) { m.User = "u2" }, []string{"user"}},
				{"another gift", func(m *wire.Message) { m.Gift = "rose" }, []string{"gift"}},
				{"another value", func(m *wire.Message) { m.Value = 999 }, []string{"value"}},
				{"another count", func(m *wire.Message) { m.Count = 1 }, []string{"count"}},
				{"all of them", func(m *wire.Message) { m.User, m.Gift, m.Value, m.Count = "u2", "rose", 1, 0 }, []string{"user", "gift", "value", "count"}},
			} {
				m := testGift(100)
				c.mod(&m)
				_, dup, err := e.log.AppendGift(context.Background(), "reuse", "reuse-1", m)
				ce, ok := errors.AsType[*ingest.OrderConflictError](err)
				if !ok || !errors.Is(err, ingest.ErrOrderConflict) || dup {
					t.Fatalf("%s: duplicate %v, %v; want ErrOrderConflict", c.name, dup, err)
				}
				if ce.ID != id || ce.Room != "reuse" || ce.Order != "reuse-1" || ce.First != first || !slices.Equal(ce.Fields, c.fields) {
					t.Fatalf("%s: %+v, want entry %s, first %+v, fields %v", c.name, ce, id, first, c.fields)
				}
			}
			if es := liveEntries(t, e.streams, "reuse"); len(es) != 1 || es[0].ID != id {
				t.Fatalf("live lane holds %+v, want the first gift alone", es)
			}
			// A count of 0 is one gift: the same terms as a count of 1.
			one := testGift(5)
			one.Count = 1
			a := mustAppendGift(t, e.log, "reuse", "reuse-2", one, false)
			one.Count = 0
			if again := mustAppendGift(t, e.log, "reuse", "reuse-2", one, true); again != a {
				t.Fatalf("count 0 after count 1 answered %s, want %s", again, a)
			}
		}},
		{"an order id used in another room is refused, naming the first room", func(t *testing.T, e env) {
			id := mustAppendGift(t, e.log, "hall-a", "o-x", testGift(100), false)
			_, dup, err := e.log.AppendGift(context.Background(), "hall-b", "o-x", testGift(100))
			ce, ok := errors.AsType[*ingest.OrderConflictError](err)
			if !ok || !errors.Is(err, ingest.ErrOrderConflict) || dup {
				t.Fatalf("another room: duplicate %v, %v; want ErrOrderConflict", dup, err)
			}
			if ce.Room != "hall-b" || ce.FirstRoom != "hall-a" || ce.Order != "o-x" || !slices.Equal(ce.Fields, []string{"room"}) {
				t.Fatalf("another room: %+v, want first room hall-a, fields [room]", ce)
			}
			if es := liveEntries(t, e.streams, "hall-b"); len(es) != 0 {
				t.Fatalf("the other room's live lane holds %+v, want nothing", es)
			}
			// The first room's retry is still the one order.
			if again := mustAppendGift(t, e.log, "hall-a", "o-x", testGift(100), true); again != id {
				t.Fatalf("retry in the first room answered %s, want %s", again, id)
			}
			if e.rdb != nil {
				if got, err := e.rdb.Get(context.Background(), "danmaku:{order:o-x}:room").Result(); err != nil || got != "hall-a" {
					t.Fatalf("order room record = %q, %v; want hall-a under the order's hash tag", got, err)
				}
			}
		}},
		{"reads back through the stream store", func(t *testing.T, e env) {
			m := testGift(100)
			m.ID, m.Order = "junk-id", "junk-order" // AppendGift sets both
			id := mustAppendGift(t, e.log, "fields", "order-42", m, false)
			want := testGift(100)
			want.ID, want.Order = id, "order-42"
			es := liveEntries(t, e.streams, "fields")
			if len(es) != 1 || !reflect.DeepEqual(es[0], want) {
				t.Fatalf("read back %+v, want %+v", es, want)
			}
			// The slicer finds the room through the registry.
			rooms, err := e.streams.Rooms(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(rooms, func(r stream.Room) bool { return r.ID == "fields" }) {
				t.Fatalf("rooms %+v do not list the gift's room", rooms)
			}
		}},
		{"concurrent appends of one order store one entry", func(t *testing.T, e env) {
			const n = 32
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				ids   [n]string
				dups  [n]bool
				errs  [n]error
			)
			for i := range n {
				wg.Go(func() {
					<-start
					ids[i], dups[i], errs[i] = e.log.AppendGift(context.Background(), "race", "race-1", testGift(100))
				})
			}
			close(start)
			wg.Wait()
			es := liveEntries(t, e.streams, "race")
			if len(es) != 1 {
				t.Fatalf("live lane holds %d entries for one order, want 1", len(es))
			}
			originals := 0
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("call %d: %v", i, errs[i])
				}
				if ids[i] != es[0].ID {
					t.Errorf("call %d answered %s, stored %s", i, ids[i], es[0].ID)
				}
				if !dups[i] {
					originals++
				}
			}
			if originals != 1 {
				t.Errorf("%d calls claim to have appended, want 1", originals)
			}
		}},
		{"orders are whole, whatever their ids hold", func(t *testing.T, e env) {
			a := mustAppendGift(t, e.log, "room-a", "w1", testGift(1), false)
			b := mustAppendGift(t, e.log, "room-b", "w2", testGift(2), false)
			mustAppendGift(t, e.log, "room-a", "w1/x", testGift(3), false) // order ids may hold anything
			mustAppendGift(t, e.log, "room-a", "{w1}", testGift(4), false)
			mustAppendGift(t, e.log, "room-a", "w1}:room", testGift(5), false)
			if again := mustAppendGift(t, e.log, "room-b", "w2", testGift(2), true); again != b {
				t.Fatalf("room-b's duplicate answered %s, want %s", again, b)
			}
			if again := mustAppendGift(t, e.log, "room-a", "w1", testGift(1), true); again != a {
				t.Fatalf("room-a's duplicate answered %s, want %s", again, a)
			}
			if na, nb := len(liveEntries(t, e.streams, "room-a")), len(liveEntries(t, e.streams, "room-b")); na != 4 || nb != 1 {
				t.Fatalf("room-a holds %d, room-b %d; want 4 and 1", na, nb)
			}
		}},
		{"an order is forgotten after its TTL", func(t *testing.T, e env) {
			short := e.newLog(t, 200*time.Millisecond)
			first := mustAppendGift(t, short, "ttl", "ttl-1", testGift(1), false)
			var second string
			waitFor(t, e.pass, 25*time.Millisecond, 10*time.Second, func() bool {
				id, dup, err := short.AppendGift(context.Background(), "ttl", "ttl-1", testGift(1))
				if err != nil {
					t.Fatal(err)
				}
				if dup && id != first {
					t.Fatalf("duplicate answered %s, want %s", id, first)
				}
				second = id
				return !dup
			})
			if second == first {
				t.Fatalf("the append after the TTL answered the first id %s", first)
			}
			if n := len(liveEntries(t, e.streams, "ttl")); n != 2 {
				t.Fatalf("live lane holds %d, want 2", n)
			}
			// The new append is deduplicated in turn.
			if again := mustAppendGift(t, short, "ttl", "ttl-1", testGift(1), true); again != second {
				t.Fatalf("duplicate answered %s, want %s", again, second)
			}
		}},
		{"refuses a bad room or an empty order", func(t *testing.T, e env) {
			for _, c := range []struct{ room, order string }{{"bad room!", "o1"}, {"", "o1"}, {"bad-args", ""}} {
				if _, _, err := e.log.AppendGift(context.Background(), c.room, c.order, testGift(1)); !errors.Is(err, ingest.ErrBadGift) {
					t.Errorf("AppendGift(%q, %q): err = %v, want ErrBadGift", c.room, c.order, err)
				}
			}
			if n := len(liveEntries(t, e.streams, "bad-args")); n != 0 {
				t.Fatalf("refused gift stored %d entries", n)
			}
		}},
	}
	for _, b := range giftBackends() {
		t.Run(b.name, func(t *testing.T) {
			streams, newLog, pass, rdb := b.open(t)
			e := env{streams: streams, log: newLog(t, 0), newLog: newLog, pass: pass, rdb: rdb}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, e) })
			}
		})
	}
}

// TestRedisGiftLogEntryMatchesStore checks that a gift's entry is the one the
// stream store itself would have written for it, byte for byte, so every
// reader of the stream (slicer, edge, audit tools) sees gifts as before.
func TestRedisGiftLogEntryMatchesStore(t *testing.T) {
	ctx := context.Background()
	for _, k := range redistest.Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			rdb := k.Client(t)
			store := newRedisStore(t, rdb)
			m := testGift(100)
			m.Order = "o-1"
			if _, err := store.Append(ctx, stream.Key{Room: "by-store", Lane: stream.Live}, []wire.Message{m}); err != nil {
				t.Fatal(err)
			}
			mustAppendGift(t, newRedisGiftLog(t, rdb, store, 0), "by-log", "o-1", testGift(100), false)
			var got [2]map[string]any
			for i, room := range []string{"by-store", "by-log"} {
				xs, err := rdb.XRange(ctx, store.StreamKey(stream.Key{Room: room, Lane: stream.Live}), "-", "+").Result()
				if err != nil || len(xs) != 1 {
					t.Fatalf("XRANGE %s: %v, %v", room, xs, err)
				}
				got[i] = xs[0].Values
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Fatalf("gift log entry %q, stream store entry %q", got[1], got[0])
			}
		})
	}
}

// TestRedisGiftLogRecordsOfOlderVersions: records an older version left
// behind, met during a rolling upgrade. A Reserve/Commit order book (the
// design this replaced) left "" while a call held an order: no id to
// answer, so the gift is appended. An order recorded before terms were kept
// beside it cannot be compared: a repeat is answered as the duplicate it
// most likely is.
func TestRedisGiftLogRecordsOfOlderVersions(t *testing.T) {
	ctx := context.Background()
	for _, k := range redistest.Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			rdb := k.Client(t)
			store := newRedisStore(t, rdb)
			l := newRedisGiftLog(t, rdb, store, 0)
			for _, c := range []struct {
				room, record string
				dup          bool
			}{{"reserved", "", false}, {"termless", "1-1", true}} {
				if err := rdb.Set(ctx, "danmaku:{room:"+c.room+"}:order:"+c.room+"-1", c.record, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				id := mustAppendGift(t, l, c.room, c.room+"-1", testGift(1), c.dup)
				if c.dup && id != c.record {
					t.Fatalf("%s: duplicate answered %s, want %s", c.room, id, c.record)
				}
				if again := mustAppendGift(t, l, c.room, c.room+"-1", testGift(1), true); again != id {
					t.Fatalf("%s: duplicate answered %s, want %s", c.room, again, id)
				}
			}
		})
	}
}

func TestGiftLogConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	store := newRedisStore(t, rdb)
	for _, c := range []struct {
		name string
		cfg  ingest.RedisGiftLogConfig
		ok   bool
	}{
		{"minimal", ingest.RedisGiftLogConfig{Client: rdb, Streams: store}, true},
		{"no client", ingest.RedisGiftLogConfig{Streams: store}, false},
		{"no streams", ingest.RedisGiftLogConfig{Client: rdb}, false},
		{"negative TTL", ingest.RedisGiftLogConfig{Client: rdb, Streams: store, OrderTTL: -time.Second}, false},
		{"negative RegisterEvery", ingest.RedisGiftLogConfig{Client: rdb, Streams: store, RegisterEvery: -time.Second}, false},
		{"wait", ingest.RedisGiftLogConfig{Client: rdb, Streams: store, WaitReplicas: 1, WaitTimeout: time.Second}, true},
		{"negative WaitReplicas", ingest.RedisGiftLogConfig{Client: rdb, Streams: store, WaitReplicas: -1}, false},
		{"negative WaitTimeout", ingest.RedisGiftLogConfig{Client: rdb, Streams: store, WaitReplicas: 1, WaitTimeout: -time.Second}, false},
		{"wait on a ring", ingest.RedisGiftLogConfig{Client: redis.NewRing(&redis.RingOptions{}), Streams: store, WaitReplicas: 1}, false},
	} {
		if _, err := ingest.NewRedisGiftLog(c.cfg); (err == nil) != c.ok {
			t.Errorf("redis %s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
	mem := stream.NewMemoryStore(nil)
	for _, c := range []struct {
		name string
		cfg  ingest.MemoryGiftLogConfig
		ok   bool
	}{
		{"minimal", ingest.MemoryGiftLogConfig{Streams: mem}, true},
		{"no streams", ingest.MemoryGiftLogConfig{}, false},
		{"negative TTL", ingest.MemoryGiftLogConfig{Streams: mem, OrderTTL: -time.Second}, false},
	} {
		if _, err := ingest.NewMemoryGiftLog(c.cfg); (err == nil) != c.ok {
			t.Errorf("memory %s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// TestRedisGiftLogWaitWithoutReplica: a master with no replica to
// acknowledge cannot confirm a gift under WaitReplicas, so it does not
// store it: the order is refused (ErrReplicasOffline, not the ambiguous
// ErrNotReplicated of a stored gift whose WAIT fell short), and so is its
// retry, until a replica is online. (A stored gift's retry answering it
// stored: TestClusterWaitGiftAnsweredStoredByItsRetry.)
func TestRedisGiftLogWaitWithoutReplica(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t) // one server, no replica
	store := newRedisStore(t, rdb)
	l, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: store, Logger: quiet, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := l.AppendGift(ctx, "alone", "o1", testGift(1)); !errors.Is(err, ingest.ErrReplicasOffline) || errors.Is(err, ingest.ErrNotReplicated) {
			t.Fatalf("AppendGift without a replica: err = %v, want ErrReplicasOffline", err)
		}
	}
	if es := liveEntries(t, store, "alone"); len(es) != 0 {
		t.Fatalf("live lane holds %d entries, want none: a gift no replica can confirm is not stored", len(es))
	}
}

// mustAppendGift appends and checks the duplicate flag; it returns the id.
func mustAppendGift(t *testing.T, l ingest.GiftLog, room, order string, m wire.Message, wantDup bool) string {
	t.Helper()
	id, dup, err := l.AppendGift(context.Background(), room, order, m)
	if err != nil || id == "" || dup != wantDup {
		t.Fatalf("AppendGift(%s, %s) = %q, duplicate %v, %v; want an id, duplicate %v", room, order, id, dup, err, wantDup)
	}
	return id
}

func liveEntries(t *testing.T, s stream.Store, room string) []wire.Message {
	t.Helper()
	es, err := s.Read(context.Background(), stream.Key{Room: room, Lane: stream.Live}, "", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// backlogBackend is a GiftLog over a room backlog the test publishes to as
// the room's slicer leader would (slicer.MemoryBacklog, slicer.RedisBacklog),
// with a bound of 5 s in room "tight" and the default (30 s) elsewhere.
// lapse waits until a value published with ttl has lapsed.
type backlogBackend struct {
	name string
	open func(t *testing.T) (streams stream.Store, log ingest.GiftLog, backlog slicer.Backlog, lapse func(t *testing.T, room string, ttl time.Duration))
}

func tightBound(room string) float64 {
	if room == "tight" {
		return 5
	}
	return 0
}

func backlogBackends() []backlogBackend {
	redisBackend := func(name string, client func(testing.TB) redis.UniversalClient, wait int) backlogBackend {
		return backlogBackend{name, func(t *testing.T) (stream.Store, ingest.GiftLog, slicer.Backlog, func(*testing.T, string, time.Duration)) {
			rdb := client(t)
			store := newRedisStore(t, rdb)
			l, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: store, Logger: quiet, WaitReplicas: wait, BacklogBound: tightBound})
			if err != nil {
				t.Fatal(err)
			}
			backlog := slicer.NewRedisBacklog(rdb)
			lapse := func(t *testing.T, room string, ttl time.Duration) {
				// Redis expires the key on its own clock: poll for it.
				for deadline := time.Now().Add(10 * time.Second); ; {
					v, err := backlog.Get(context.Background(), room)
					if err == nil && v == 0 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("backlog of %s still %v, %v long after its ttl %v", room, v, err, ttl)
					}
					time.Sleep(ttl / 4) // polls an expiry on Redis's own clock, with the deadline above: not synchronisation
				}
			}
			return store, l, backlog, lapse
		}}
	}
	return []backlogBackend{
		{"memory", func(t *testing.T) (stream.Store, ingest.GiftLog, slicer.Backlog, func(*testing.T, string, time.Duration)) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			store := stream.NewMemoryStore(c)
			backlog := slicer.NewMemoryBacklog(c)
			l, err := ingest.NewMemoryGiftLog(ingest.MemoryGiftLogConfig{Streams: store, Clock: c, Backlog: backlog, BacklogBound: tightBound})
			if err != nil {
				t.Fatal(err)
			}
			return store, l, backlog, func(_ *testing.T, _ string, ttl time.Duration) { c.Advance(ttl) }
		}},
		redisBackend("redis", func(t testing.TB) redis.UniversalClient { return redistest.Client(t) }, 0),
		redisBackend("redis-cluster", func(t testing.TB) redis.UniversalClient { return redistest.Cluster(t) }, 0),
		redisBackend("redis-cluster-wait", func(t testing.TB) redis.UniversalClient { return redistest.Cluster(t) }, 1),
	}
}

// TestGiftLogBacklog: over its room's bound, a new order is refused with
// ErrGiftBacklog and a Retry-After of the excess, and nothing is appended;
// a repeat of an appended order still gets its original answer; once the
// backlog is back under the bound (or its publisher's value lapses), the
// refused order is accepted like any new one.
func TestGiftLogBacklog(t *testing.T) {
	ctx := context.Background()
	for _, b := range backlogBackends() {
		t.Run(b.name, func(t *testing.T) {
			streams, l, backlog, lapse := b.open(t)
			set := func(room string, sec float64, ttl time.Duration) {
				t.Helper()
				if err := backlog.Set(ctx, room, sec, 0, ttl); err != nil {
					t.Fatal(err)
				}
			}
			refuse := func(room, order string, backlog, bound float64, retry time.Duration) {
				t.Helper()
				before := len(liveEntries(t, streams, room))
				id, dup, err := l.AppendGift(ctx, room, order, testGift(1))
				var be *ingest.GiftBacklogError
				if !errors.Is(err, ingest.ErrGiftBacklog) || !errors.As(err, &be) || id != "" || dup {
					t.Fatalf("AppendGift(%s, %s) over the bound = %q, %v, %v; want ErrGiftBacklog", room, order, id, dup, err)
				}
				if be.Room != room || be.Backlog != backlog || be.Bound != bound || be.RetryAfter != retry {
					t.Fatalf("refusal %+v, want backlog %v, bound %v, retry after %v", be, backlog, bound, retry)
				}
				if after := len(liveEntries(t, streams, room)); after != before {
					t.Fatalf("a refused gift was appended: %d entries, was %d", after, before)
				}
			}

			first := mustAppendGift(t, l, "tight", "o1", testGift(1), false)
			set("tight", 5, time.Minute) // at the bound, not over it
			mustAppendGift(t, l, "tight", "o2", testGift(1), false)
			set("tight", 7.5, time.Minute)
			refuse("tight", "o3", 7.5, 5, 3*time.Second)
			set("tight", 5.001, time.Minute)
			refuse("tight", "o3", 5.001, 5, time.Second) // at least a second
			if again := mustAppendGift(t, l, "tight", "o1", testGift(1), true); again != first {
				t.Fatalf("repeat over the bound answered %s, want the original %s", again, first)
			}
			// Other rooms have their own backlog and the default bound.
			mustAppendGift(t, l, "loose", "l3", testGift(1), false)
			set("loose", 30.5, time.Minute)
			refuse("loose", "l4", 30.5, 30, time.Second)
			set("loose", 29, time.Minute)
			mustAppendGift(t, l, "loose", "l4", testGift(1), false)
			// Back under the bound: the refused order goes in, once.
			set("tight", 1, time.Minute)
			id := mustAppendGift(t, l, "tight", "o3", testGift(1), false)
			if again := mustAppendGift(t, l, "tight", "o3", testGift(1), true); again != id {
				t.Fatalf("repeat answered %s, want %s", again, id)
			}
			// Each gift accepted adds the published seconds per gift, until
			// the next publication: a burst cannot outrun the bound.
			if err := backlog.Set(ctx, "tight", 4, 0.5, time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, o := range []string{"b1", "b2", "b3"} { // at 4, 4.5, 5
				mustAppendGift(t, l, "tight", o, testGift(1), false)
			}
			refuse("tight", "b4", 5.5, 5, time.Second)
			if v, err := backlog.Get(ctx, "tight"); err != nil || v != 5.5 {
				t.Fatalf("backlog after three gifts = %v, %v; want 5.5", v, err)
			}
			// A published value lapses with its publisher.
			ttl := 200 * time.Millisecond
			set("tight", 100, ttl)
			refuse("tight", "o5", 100, 5, 95*time.Second)
			lapse(t, "tight", ttl)
			mustAppendGift(t, l, "tight", "o5", testGift(1), false)
			if es := liveEntries(t, streams, "tight"); len(es) != 7 {
				t.Fatalf("room holds %d gifts, want the 7 accepted", len(es))
			}
		})
	}
}
