package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// lotteryEnv is one LotteryStore under test, with a constructor of fast
// lanes over the same streams (one per node), the streams, the clock the
// store judges by, and pass (as in fastBackend).
type lotteryEnv struct {
	store   ingest.LotteryStore
	newLane func() ingest.FastLane
	streams stream.Store
	clk     clock.Clock
	pass    func(time.Duration)
	rdb     redis.UniversalClient
}

type lotteryBackend struct {
	name string
	open func(t *testing.T) lotteryEnv
}

func lotteryBackends() []lotteryBackend {
	onRedis := func(t *testing.T, rdb redis.UniversalClient) lotteryEnv {
		store := newRedisStore(t, rdb)
		return lotteryEnv{
			store: ingest.NewRedisLotteryStore(rdb, nil),
			newLane: func() ingest.FastLane {
				f, err := ingest.NewRedisFastLane(ingest.RedisFastLaneConfig{Client: rdb, Streams: store, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				return f
			},
			streams: store, clk: clock.Real{}, pass: time.Sleep, rdb: rdb,
		}
	}
	return []lotteryBackend{
		{"memory", func(t *testing.T) lotteryEnv {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			streams := stream.NewMemoryStore(c)
			f := ingest.NewMemoryFastLane(streams, c)
			return lotteryEnv{store: ingest.NewMemoryLotteryStore(c), newLane: func() ingest.FastLane { return f }, streams: streams, clk: c, pass: c.Advance}
		}},
		{"redis", func(t *testing.T) lotteryEnv { return onRedis(t, redistest.Client(t)) }},
		{"redis-cluster", func(t *testing.T) lotteryEnv { return onRedis(t, redistest.Cluster(t)) }},
	}
}

func startLottery(t *testing.T, e lotteryEnv, room, id, keyword string, d time.Duration) ingest.Lottery {
	t.Helper()
	now := e.clk.Now()
	l := ingest.Lottery{ID: id, Room: room, Keyword: keyword, Until: now.Add(d).Truncate(time.Millisecond), StartedAt: now}
	if _, err := e.store.Start(context.Background(), l); err != nil {
		t.Fatalf("Start(%s/%s): %v", room, id, err)
	}
	return l
}

func enterLottery(t *testing.T, s ingest.LotteryStore, room, id, user string) bool {
	t.Helper()
	first, err := s.Enter(context.Background(), room, id, user)
	if err != nil {
		t.Fatalf("Enter(%s/%s, %s): %v", room, id, user, err)
	}
	return first
}

// allEntrants pages through a lottery's entrants and returns them as a set.
func allEntrants(t *testing.T, s ingest.LotteryStore, room, id string, page int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var cursor uint64
	for pages := 0; ; pages++ {
		users, next, err := s.Entrants(context.Background(), room, id, cursor, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			out[u] = true
		}
		if next == 0 {
			return out
		}
		if pages > 1_000_000 {
			t.Fatal("entrants never end")
		}
		cursor = next
	}
}

// TestLotteryStoreConformance runs every LotteryStore through the same
// cases; each case uses its own rooms.
func TestLotteryStoreConformance(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		run  func(t *testing.T, e lotteryEnv)
	}{
		{"each user counted once", func(t *testing.T, e lotteryEnv) {
			startLottery(t, e, "once", "l1", "抽奖", time.Hour)
			for i := range 50 {
				u := fmt.Sprint("u", i%20)
				if first := enterLottery(t, e.store, "once", "l1", u); first != (i < 20) {
					t.Fatalf("entry %d of %s: first=%v", i, u, first)
				}
			}
			if n, err := e.store.Count(ctx, "once", "l1"); err != nil || n != 20 {
				t.Fatalf("Count = %d, %v; want 20", n, err)
			}
			got := allEntrants(t, e.store, "once", "l1", 7)
			if len(got) != 20 || !got["u0"] || !got["u19"] {
				t.Fatalf("entrants %v, want u0..u19", got)
			}
		}},
		{"start is idempotent, an id is taken", func(t *testing.T, e lotteryEnv) {
			l := startLottery(t, e, "idem", "l1", "go", time.Hour)
			// Sent again, even with another end (a start by duration
			// retried): the lottery as first started.
			again := l
			again.Until = l.Until.Add(time.Minute)
			got, err := e.store.Start(ctx, again)
			if err != nil || !got.Until.Equal(l.Until) {
				t.Fatalf("the same start again: %+v, %v; want the first end kept", got, err)
			}
			other := l
			other.Keyword = "other"
			if _, err := e.store.Start(ctx, other); !errors.Is(err, ingest.ErrLotteryExists) {
				t.Fatalf("another keyword under the id: %v, want ErrLotteryExists", err)
			}
			// The same id in another room is another lottery.
			other.Room = "idem-2"
			if _, err := e.store.Start(ctx, other); err != nil {
				t.Fatal(err)
			}
			got, err = e.store.Get(ctx, "idem", "l1")
			if err != nil || got.Keyword != "go" || !got.Until.Equal(l.Until) {
				t.Fatalf("Get = %+v, %v", got, err)
			}
		}},
		{"stop closes it everywhere", func(t *testing.T, e lotteryEnv) {
			l := startLottery(t, e, "stop", "l1", "go", time.Hour)
			enterLottery(t, e.store, "stop", "l1", "a")
			_, v0, err := e.store.Running(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stopped, err := e.store.Stop(ctx, "stop", "l1", e.clk.Now())
			if err != nil || stopped.StoppedAt.IsZero() {
				t.Fatalf("Stop = %+v, %v", stopped, err)
			}
			if _, err := e.store.Enter(ctx, "stop", "l1", "b"); !errors.Is(err, ingest.ErrLotteryClosed) {
				t.Fatalf("Enter after Stop: %v, want ErrLotteryClosed", err)
			}
			again, err := e.store.Stop(ctx, "stop", "l1", e.clk.Now().Add(time.Minute))
			if err != nil || !again.StoppedAt.Equal(stopped.StoppedAt) {
				t.Fatalf("a second Stop = %+v, %v; want the first stop kept", again, err)
			}
			running, v1, err := e.store.Running(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v1 == v0 {
				t.Fatal("Stop did not move the version")
			}
			for _, r := range running {
				if r.Room == "stop" {
					t.Fatalf("stopped lottery still running: %+v", r)
				}
			}
			if n, _ := e.store.Count(ctx, "stop", "l1"); n != 1 {
				t.Fatalf("entrants after stop: %d, want 1 kept", n)
			}
			// A stopped lottery's id is not started again.
			if _, err := e.store.Start(ctx, l); !errors.Is(err, ingest.ErrLotteryExists) {
				t.Fatalf("restart of a stopped lottery: %v", err)
			}
		}},
		{"closes at until", func(t *testing.T, e lotteryEnv) {
			startLottery(t, e, "until", "l1", "go", 300*time.Millisecond)
			enterLottery(t, e.store, "until", "l1", "a")
			e.pass(300 * time.Millisecond)
			// On Redis the store's clock is Redis's: poll for the close.
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := e.store.Enter(ctx, "until", "l1", "b")
				if errors.Is(err, ingest.ErrLotteryClosed) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatal("still open long after until")
				}
				e.pass(20 * time.Millisecond)
			}
		}},
		{"running and version", func(t *testing.T, e lotteryEnv) {
			v0, err := e.store.Version(ctx)
			if err != nil {
				t.Fatal(err)
			}
			startLottery(t, e, "run", "l1", "go", time.Hour)
			running, v1, err := e.store.Running(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v1 == v0 {
				t.Fatal("Start did not move the version")
			}
			if v, _ := e.store.Version(ctx); v != v1 {
				t.Fatalf("Version %d, Running's %d", v, v1)
			}
			found := false
			for _, r := range running {
				found = found || (r.Room == "run" && r.ID == "l1" && r.Keyword == "go")
			}
			if !found {
				t.Fatalf("running %+v lacks run/l1", running)
			}
		}},
		{"unknown and bad", func(t *testing.T, e lotteryEnv) {
			if _, err := e.store.Get(ctx, "none", "l1"); !errors.Is(err, ingest.ErrNoLottery) {
				t.Fatalf("Get unknown: %v", err)
			}
			if _, err := e.store.Enter(ctx, "none", "l1", "a"); !errors.Is(err, ingest.ErrNoLottery) {
				t.Fatalf("Enter unknown: %v", err)
			}
			if _, err := e.store.Stop(ctx, "none", "l1", e.clk.Now()); !errors.Is(err, ingest.ErrNoLottery) {
				t.Fatalf("Stop unknown: %v", err)
			}
			now := e.clk.Now()
			for _, l := range []ingest.Lottery{
				{ID: "", Room: "bad", Keyword: "go", Until: now.Add(time.Hour)},
				{ID: "a:b", Room: "bad", Keyword: "go", Until: now.Add(time.Hour)},
				{ID: "l1", Room: "bad room", Keyword: "go", Until: now.Add(time.Hour)},
				{ID: "l1", Room: "bad", Keyword: "", Until: now.Add(time.Hour)},
				{ID: "l1", Room: "bad", Keyword: " go ", Until: now.Add(time.Hour)},
				{ID: "l1", Room: "bad", Keyword: strings.Repeat("x", 33), Until: now.Add(time.Hour)},
				{ID: "l1", Room: "bad", Keyword: "go", Until: now.Add(-time.Second)},
				{ID: "l1", Room: "bad", Keyword: "go", Until: now.Add(25 * time.Hour)},
			} {
				if _, err := e.store.Start(ctx, l); !errors.Is(err, ingest.ErrBadLottery) {
					t.Errorf("Start(%+v) = %v, want ErrBadLottery", l, err)
				}
			}
			startLottery(t, e, "bad", "ok", "go", time.Hour)
			if _, err := e.store.Enter(ctx, "bad", "ok", ""); !errors.Is(err, ingest.ErrBadLottery) {
				t.Errorf("Enter with no user: %v", err)
			}
			if _, _, err := e.store.Entrants(ctx, "bad", "ok", 0, 0); !errors.Is(err, ingest.ErrBadLottery) {
				t.Errorf("Entrants count 0: %v", err)
			}
		}},
	}
	for _, b := range lotteryBackends() {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, e) })
			}
		})
	}
}

func newLotteries(t testing.TB, store ingest.LotteryStore, fast ingest.FastLane, c clock.Clock, reg prometheus.Registerer) *ingest.Lotteries {
	t.Helper()
	l, err := ingest.NewLotteries(ingest.LotteriesConfig{Store: store, FastLane: fast, Clock: c, Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

func lotteryComment(user, text string) wire.Message {
	return wire.Message{Kind: wire.KindBarrage, User: user, Nick: "n", Text: text}
}

func TestLotteriesMatch(t *testing.T) {
	ctx := context.Background()
	c := clock.NewFake(time.Unix(1_700_000_000, 0))
	streams := stream.NewMemoryStore(c)
	store := ingest.NewMemoryLotteryStore(c)
	lots := newLotteries(t, store, ingest.NewMemoryFastLane(streams, c), c, nil)
	e := lotteryEnv{store: store, clk: c}

	if m, err := lots.Match(ctx, "r", lotteryComment("a", "Go")); err != nil || m.Lottery != "" {
		t.Fatalf("no lottery: %+v, %v", m, err)
	}
	startLottery(t, e, "r", "l1", "go", time.Minute)
	if m, _ := lots.Match(ctx, "r", lotteryComment("a", "Go")); m.Lottery != "" {
		t.Fatal("matched before the node's snapshot saw the lottery")
	}
	if err := lots.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lots.Active("r"); len(got) != 1 || got[0].ID != "l1" {
		t.Fatalf("Active = %+v", got)
	}
	for _, c := range []struct {
		user, text string
		want       ingest.LotteryEntry
	}{
		{"a", "GO", ingest.LotteryEntry{Lottery: "l1", First: true, Shown: true}},
		{"a", "go", ingest.LotteryEntry{Lottery: "l1"}},
		{"b", "go!", ingest.LotteryEntry{}},
		{"b", "let's go", ingest.LotteryEntry{}},
	} {
		if m, err := lots.Match(ctx, "r", lotteryComment(c.user, c.text)); err != nil || m != c.want {
			t.Errorf("Match(%s, %q) = %+v, %v; want %+v", c.user, c.text, m, err, c.want)
		}
	}
	if m, _ := lots.Match(ctx, "other", lotteryComment("a", "go")); m.Lottery != "" {
		t.Fatal("matched in another room")
	}
	es, _ := streams.Read(ctx, stream.Key{Room: "r", Lane: stream.Barrage}, "0", 10, 0)
	if len(es) != 1 || es[0].Text != "GO" || es[0].User != "a" {
		t.Fatalf("displayed %+v, want a's first entry", es)
	}
	// Stopped elsewhere, this node's snapshot is stale: the store refuses
	// the entry and the comment passes on as barrage.
	if _, err := store.Stop(ctx, "r", "l1", c.Now()); err != nil {
		t.Fatal(err)
	}
	if m, err := lots.Match(ctx, "r", lotteryComment("c", "go")); err != nil || m.Lottery != "" {
		t.Fatalf("after a stop elsewhere: %+v, %v", m, err)
	}
	// Passed its end: not active, whatever the snapshot.
	startLottery(t, e, "r", "l2", "go", time.Minute)
	_ = lots.Refresh(ctx)
	c.Advance(time.Minute)
	if got := lots.Active("r"); len(got) != 0 {
		t.Fatalf("Active after the end: %+v", got)
	}
}

func TestLotteriesMatchWithoutLotteryAllocatesNothing(t *testing.T) {
	c := clock.NewFake(time.Unix(1_700_000_000, 0))
	lots := newLotteries(t, ingest.NewMemoryLotteryStore(c), ingest.NewMemoryFastLane(stream.NewMemoryStore(c), c), c, nil)
	m := lotteryComment("a", "hello")
	if n := testing.AllocsPerRun(100, func() { _, _ = lots.Match(context.Background(), "r", m) }); n != 0 {
		t.Fatalf("%v allocations per comment in a room without a lottery", n)
	}
}

// failingStore fails every Enter: the barrage handler must answer 503.
type failingStore struct{ ingest.LotteryStore }

func (failingStore) Enter(context.Context, string, string, string) (bool, error) {
	return false, errors.New("down")
}

// countingStore counts Enter calls.
type countingStore struct {
	ingest.LotteryStore
	enters atomic.Int64
}

func (s *countingStore) Enter(ctx context.Context, room, id, user string) (bool, error) {
	s.enters.Add(1)
	return s.LotteryStore.Enter(ctx, room, id, user)
}

func TestLotteriesRepeatsStayOnTheNode(t *testing.T) {
	c := clock.NewFake(time.Unix(1_700_000_000, 0))
	mem := ingest.NewMemoryLotteryStore(c)
	startLottery(t, lotteryEnv{store: mem, clk: c}, "r", "l1", "go", time.Minute)
	store := &countingStore{LotteryStore: mem}
	lots := newLotteries(t, store, ingest.NewMemoryFastLane(stream.NewMemoryStore(c), c), c, nil)
	for i := range 5 {
		m, err := lots.Match(context.Background(), "r", lotteryComment("a", "go"))
		if err != nil || m.Lottery != "l1" || m.First != (i == 0) {
			t.Fatalf("entry %d: %+v, %v", i, m, err)
		}
	}
	if n := store.enters.Load(); n != 1 {
		t.Fatalf("%d store calls for one user's 5 entries, want 1", n)
	}
}

func TestLotteriesMatchStoreError(t *testing.T) {
	c := clock.NewFake(time.Unix(1_700_000_000, 0))
	mem := ingest.NewMemoryLotteryStore(c)
	startLottery(t, lotteryEnv{store: mem, clk: c}, "r", "l1", "go", time.Minute)
	lots := newLotteries(t, failingStore{mem}, ingest.NewMemoryFastLane(stream.NewMemoryStore(c), c), c, nil)
	if _, err := lots.Match(context.Background(), "r", lotteryComment("a", "go")); err == nil {
		t.Fatal("no error from a failing store")
	}
}

func TestNewLotteriesChecksConfig(t *testing.T) {
	c := clock.NewFake(time.Unix(1_700_000_000, 0))
	store, fast := ingest.NewMemoryLotteryStore(c), ingest.NewMemoryFastLane(stream.NewMemoryStore(c), c)
	for _, cfg := range []ingest.LotteriesConfig{{}, {Store: store}, {FastLane: fast}, {Store: store, FastLane: fast, DisplayCap: -1}, {Store: store, FastLane: fast, Reload: -time.Second}} {
		if _, err := ingest.NewLotteries(cfg); err == nil {
			t.Errorf("NewLotteries(%+v): no error", cfg)
		}
	}
}

// TestLotteryOfAHundredThousandEntries is the acceptance case: 100,000
// entries from 20,000 users, some entering many times, sent to two ingest
// nodes. Every user is counted exactly once, and no second of the store's
// clock displays more than the cap (30) of the room's entries.
func TestLotteryOfAHundredThousandEntries(t *testing.T) {
	const (
		users   = 20_000
		entries = 100_000
		room    = "concert"
	)
	// Every user enters once; the other 80,000 entries come from a few
	// hundred eager users, some of whom enter hundreds of times.
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]string, 0, entries)
	for i := range users {
		order = append(order, fmt.Sprint("user-", i))
	}
	for len(order) < entries {
		i := int(rng.ExpFloat64() * 50)
		order = append(order, fmt.Sprint("user-", i%users))
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	for _, b := range lotteryBackends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			reg := prometheus.NewRegistry()
			nodes := []*ingest.Lotteries{
				newLotteries(t, e.store, e.newLane(), e.clk, reg),
				newLotteries(t, e.store, e.newLane(), e.clk, nil),
			}
			startLottery(t, e, room, "draw", "抽奖", time.Hour)
			for _, n := range nodes {
				if err := n.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var shown, first, repeat int
			if fc, ok := e.clk.(*clock.Fake); ok {
				// In memory, one entry per millisecond of the fake clock:
				// 1,000 a second, 100 s in all.
				for i, u := range order {
					m, err := nodes[i%2].Match(ctx, room, lotteryComment(u, "抽奖"))
					if err != nil || m.Lottery != "draw" {
						t.Fatalf("entry %d: %+v, %v", i, m, err)
					}
					tallyEntry(m, &shown, &first, &repeat)
					fc.Advance(time.Millisecond)
				}
			} else {
				// On Redis, as fast as 32 senders go, over both nodes.
				var mu sync.Mutex
				var wg sync.WaitGroup
				next := make(chan int)
				errs := make(chan error, 1)
				for w := range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							m, err := nodes[w%2].Match(ctx, room, lotteryComment(order[i], "抽奖"))
							if err == nil && m.Lottery != "draw" {
								err = fmt.Errorf("entry %d not matched: %+v", i, m)
							}
							if err != nil {
								select {
								case errs <- err:
								default:
								}
								continue
							}
							mu.Lock()
							tallyEntry(m, &shown, &first, &repeat)
							mu.Unlock()
						}
					}()
				}
				for i := range order {
					next <- i
				}
				close(next)
				wg.Wait()
				select {
				case err := <-errs:
					t.Fatal(err)
				default:
				}
			}
			if first != users || repeat != entries-users {
				t.Fatalf("%d first and %d repeat entries, want %d and %d", first, repeat, users, entries-users)
			}
			if n, err := e.store.Count(ctx, room, "draw"); err != nil || n != users {
				t.Fatalf("Count = %d, %v; want %d", n, err, users)
			}
			got := allEntrants(t, e.store, room, "draw", 1000)
			if len(got) != users {
				t.Fatalf("listed %d distinct entrants, want %d", len(got), users)
			}
			for i := range users {
				if u := fmt.Sprint("user-", i); !got[u] {
					t.Fatalf("%s entered and is not listed", u)
				}
			}
			displayed := wantAtMostPerSecond(t, e.streams, room, 30)
			if displayed != shown || displayed == 0 {
				t.Fatalf("%d entries displayed, Match answered %d shown", displayed, shown)
			}
			if got := lotteryMetric(t, reg, "danmaku_ingest_lottery_entries_total", "kind", "first") +
				lotteryMetric(t, reg, "danmaku_ingest_lottery_entries_total", "kind", "repeat"); got == 0 {
				t.Fatal("no entries counted in node 1's metrics")
			}
			t.Logf("%s: %d entrants counted once of %d entries; %d displayed, at most 30 a second", b.name, users, entries, displayed)
		})
	}
}

func tallyEntry(m ingest.LotteryEntry, shown, first, repeat *int) {
	if m.Shown {
		*shown++
	}
	if m.First {
		*first++
	} else {
		*repeat++
	}
}

func lotteryMetric(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// lotteryAPIFixture serves a LotteryAPI over a memory store, with a keyring
// for host tokens.
type lotteryAPIFixture struct {
	store   *ingest.MemoryLotteryStore
	ring    *auth.Keyring
	engine  *gin.Engine
	changed int
}

const lotteryOpKey = "operator-key-0123456789"

func newLotteryAPIFixture(t testing.TB) *lotteryAPIFixture {
	t.Helper()
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	secrets := auth.NewMemorySecrets()
	lotteryMaster := []byte("lottery-test-master-key-0123456789-abcdef")
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: lotteryMaster, Clock: c, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: lotteryMaster, Clock: c, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := center.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ring.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &lotteryAPIFixture{store: ingest.NewMemoryLotteryStore(c), ring: ring}
	f.engine = httpx.NewEngine(httpx.EngineConfig{Role: "ingest", Logger: quiet})
	api := &ingest.LotteryAPI{Store: f.store, Keys: []string{lotteryOpKey}, Hosts: ring, Addr: "http://ingest-1", Clock: c, Changed: func(context.Context) { f.changed++ }}
	api.Register(f.engine)
	return f
}

func (f *lotteryAPIFixture) token(t testing.TB, room, user, role string) string {
	t.Helper()
	return f.tokenFor(t, "http://ingest-1", room, user, role)
}

// tokenFor is a token issued for the node at addr.
func (f *lotteryAPIFixture) tokenFor(t testing.TB, addr, room, user, role string) string {
	t.Helper()
	tok, _, err := f.ring.Sign(auth.Claims{Room: room, Role: role, Addrs: []string{addr}, Ingests: 1, RegisteredClaims: jwt.RegisteredClaims{Subject: user}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *lotteryAPIFixture) do(method, path, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	f.engine.ServeHTTP(rec, req)
	return rec
}

func lotteryErrorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var b struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("error body %q: want a code and a message (%v)", rec.Body.String(), err)
	}
	return b.Error.Code
}

func TestLotteryAPI(t *testing.T) {
	f := newLotteryAPIFixture(t)
	const base = "/v1/admin/rooms/r1/lotteries"
	start := `{"id": "l1", "keyword": " 抽奖 ", "duration_seconds": 60}`

	if rec := f.do("POST", base, lotteryOpKey, start); rec.Code != http.StatusCreated {
		t.Fatalf("start: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", base, lotteryOpKey, start); rec.Code != http.StatusCreated {
		t.Fatalf("the same start again: %d %s", rec.Code, rec.Body)
	}
	if f.changed != 2 {
		t.Fatalf("Changed called %d times, want 2", f.changed)
	}
	l, err := f.store.Get(context.Background(), "r1", "l1")
	if err != nil || l.Keyword != "抽奖" {
		t.Fatalf("stored %+v, %v: want the keyword normalised", l, err)
	}
	for _, u := range []string{"a", "b", "a", "c"} {
		if _, err := f.store.Enter(context.Background(), "r1", "l1", u); err != nil {
			t.Fatal(err)
		}
	}
	rec := f.do("GET", base+"/l1", lotteryOpKey, "")
	var got struct {
		Lottery  ingest.Lottery `json:"lottery"`
		Open     bool           `json:"open"`
		Entrants int64          `json:"entrants"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || got.Entrants != 3 || !got.Open || got.Lottery.ID != "l1" {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	// Entrants by pages of 2.
	seen := map[string]bool{}
	cursor := "0"
	for range 10 {
		rec := f.do("GET", base+"/l1/entrants?count=2&cursor="+cursor, lotteryOpKey, "")
		var page struct {
			Entrants []string `json:"entrants"`
			Cursor   string   `json:"cursor"`
			Total    int64    `json:"total"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || rec.Code != 200 || page.Total != 3 {
			t.Fatalf("entrants: %d %s", rec.Code, rec.Body)
		}
		for _, u := range page.Entrants {
			seen[u] = true
		}
		if cursor = page.Cursor; cursor == "0" {
			break
		}
	}
	if len(seen) != 3 || cursor != "0" {
		t.Fatalf("listed %v, last cursor %s", seen, cursor)
	}
	if rec := f.do("GET", base, lotteryOpKey, ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"l1"`) {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", base+"/l1/stop", lotteryOpKey, ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"open":false`) {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}

	// The room's host may run its lotteries; nobody else may.
	host := f.token(t, "r1", "host-1", auth.RoleHost)
	if rec := f.do("POST", base, host, `{"id": "l2", "keyword": "go", "duration_seconds": 30}`); rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"started_by":"host-1"`) {
		t.Fatalf("host start: %d %s", rec.Code, rec.Body)
	}

	for _, c := range []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"no key", "GET", base + "/l1", "", "", 401, "bad_operator_key"},
		{"wrong key", "GET", base + "/l1", "nope", "", 401, "bad_operator_key"},
		{"viewer token", "GET", base + "/l1", f.token(t, "r1", "v", auth.RoleViewer), "", 403, "forbidden"},
		{"host of another room", "GET", base + "/l1", f.token(t, "r2", "h", auth.RoleHost), "", 403, "forbidden"},
		// As announcements: a host's token must be issued for this node.
		{"host token for another node", "GET", base + "/l1", f.tokenFor(t, "http://ingest-2", "r1", "h", auth.RoleHost), "", 403, "wrong_node"},
		{"host token for another node, start", "POST", base, f.tokenFor(t, "http://ingest-2", "r1", "h", auth.RoleHost), `{"id": "l9", "keyword": "go", "duration_seconds": 5}`, 403, "wrong_node"},
		{"unknown lottery", "GET", base + "/nope", lotteryOpKey, "", 404, "no_such_lottery"},
		{"entrants of an unknown lottery", "GET", base + "/nope/entrants", lotteryOpKey, "", 404, "no_such_lottery"},
		{"stop unknown", "POST", base + "/nope/stop", lotteryOpKey, "", 404, "no_such_lottery"},
		{"id taken", "POST", base, lotteryOpKey, `{"id": "l1", "keyword": "other", "duration_seconds": 60}`, 409, "lottery_exists"},
		{"no end", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go"}`, 400, "bad_lottery"},
		{"both ends", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": 5, "until": "2030-01-01T01:00:00Z"}`, 400, "bad_lottery"},
		{"past end", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "until": "2029-01-01T00:00:00Z"}`, 400, "bad_lottery"},
		{"too long", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": 100000}`, 400, "bad_lottery"},
		{"negative", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": -1}`, 400, "bad_lottery"},
		{"overflowing a duration", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": 10000000000}`, 400, "bad_lottery"},
		{"empty keyword", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "  ", "duration_seconds": 5}`, 400, "bad_lottery"},
		{"bad id", "POST", base, lotteryOpKey, `{"id": "l 3", "keyword": "go", "duration_seconds": 5}`, 400, "bad_lottery"},
		{"bad room", "POST", "/v1/admin/rooms/r!/lotteries", lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": 5}`, 400, "bad_lottery"},
		{"unknown field", "POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": 5, "prize": 1}`, 400, httpx.CodeBadJSON},
		{"not json", "POST", base, lotteryOpKey, `{`, 400, httpx.CodeBadJSON},
		{"bad cursor", "GET", base + "/l1/entrants?cursor=x", lotteryOpKey, "", 400, "bad_cursor"},
		{"bad count", "GET", base + "/l1/entrants?count=0", lotteryOpKey, "", 400, "bad_count"},
		{"count too big", "GET", base + "/l1/entrants?count=10001", lotteryOpKey, "", 400, "bad_count"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do(c.method, c.path, c.key, c.body)
			if rec.Code != c.status || lotteryErrorCode(t, rec) != c.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, c.status, c.code)
			}
		})
	}
	// A duration out of range is refused naming its range, before it is
	// turned into nanoseconds (1e10 s would overflow).
	for _, d := range []string{"-1", "86401", "10000000000"} {
		rec := f.do("POST", base, lotteryOpKey, `{"id": "l3", "keyword": "go", "duration_seconds": `+d+`}`)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "duration_seconds must be 1-86400") {
			t.Errorf("duration_seconds %s: %d %s, want 400 naming the range", d, rec.Code, rec.Body)
		}
	}
}

// BenchmarkLotteriesMatch is the barrage path's cost of the lottery step:
// in a room without a lottery (every comment of most rooms), and for a
// repeat entry on the memory store.
func BenchmarkLotteriesMatch(b *testing.B) {
	c := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := ingest.NewMemoryLotteryStore(c)
	lots := newLotteries(b, store, ingest.NewMemoryFastLane(stream.NewMemoryStore(c), c), c, nil)
	ctx := context.Background()
	b.Run("no lottery", func(b *testing.B) {
		m := lotteryComment("a", "hello")
		for b.Loop() {
			_, _ = lots.Match(ctx, "r", m)
		}
	})
	b.Run("repeat entry", func(b *testing.B) {
		now := c.Now()
		if _, err := store.Start(ctx, ingest.Lottery{ID: "l", Room: "r", Keyword: "go", Until: now.Add(time.Hour), StartedAt: now}); err != nil {
			b.Fatal(err)
		}
		if err := lots.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
		m := lotteryComment("a", "GO")
		for b.Loop() {
			_, _ = lots.Match(ctx, "r", m)
		}
	})
}
