package audit_test

import (
	"context"
	"danmaku/internal/testwait"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/objstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// flakyStore fails every Put while told to.
type flakyStore struct {
	*objstore.MemoryStore
	fail atomic.Bool
	puts atomic.Int64
}

func (s *flakyStore) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	s.puts.Add(1)
	if s.fail.Load() {
		return "", errors.New("s3: connection refused")
	}
	return s.MemoryStore.Put(ctx, key, body, opts)
}

type fixture struct {
	clk   *clock.Fake
	store *flakyStore
	reg   *prometheus.Registry
	rec   *audit.Recorder
}

func newFixture(t *testing.T, cfg audit.Config) *fixture {
	t.Helper()
	f := &fixture{clk: clock.NewFake(t0.Add(10 * time.Second)), store: &flakyStore{MemoryStore: objstore.NewMemoryStore()}, reg: prometheus.NewRegistry()}
	if cfg.Node == "" {
		cfg.Node = "node-1"
	}
	cfg.Store, cfg.Clock, cfg.Registerer, cfg.Logger = f.store, f.clk, f.reg, quiet
	r, err := audit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.rec = r
	return f
}

func (f *fixture) keys(t *testing.T) []string {
	t.Helper()
	var out []string
	if err := f.store.List(context.Background(), audit.Prefix, "", func(k string) bool { out = append(out, k); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) read(t *testing.T, q audit.Query) (recs []audit.Record, lost int64) {
	t.Helper()
	err := audit.Read(context.Background(), f.store, q, func(r audit.Record) error {
		recs = append(recs, r)
		return nil
	}, func(_ string, h audit.Header) error {
		lost += h.Lost
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs, lost
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// TestRecorderMinuteBatches: a minute's records wait until it ends, then
// go as one object per room; the metrics count them.
func TestRecorderMinuteBatches(t *testing.T) {
	f := newFixture(t, audit.Config{})
	ctx := context.Background()
	now := f.clk.Now()
	for i := range 3 {
		f.rec.Record(rec(now.Add(time.Duration(i)*time.Second), "a", fmt.Sprint("u", i), "hi", audit.Stored, ""))
	}
	f.rec.Record(rec(now, "b", "u9", "spam", audit.Dropped, "duplicate"))
	f.rec.Record(audit.Record{Room: "b", User: "u8", Text: "x", Decision: audit.Dropped, Reason: "room_bucket"}) // At from the clock
	if err := f.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if k := f.keys(t); len(k) != 0 {
		t.Fatalf("written before the minute ended: %q", k)
	}
	f.clk.Advance(time.Minute)
	if err := f.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	keys := f.keys(t)
	if len(keys) != 2 || !strings.HasPrefix(keys[0], "audit/a/20261201T1107Z/node-1.") || !strings.HasPrefix(keys[1], "audit/b/20261201T1107Z/node-1.") {
		t.Fatalf("keys %q", keys)
	}
	recs, _ := f.read(t, audit.Query{Room: "a", Since: t0})
	if len(recs) != 3 || recs[0].User != "u0" || recs[2].User != "u2" {
		t.Fatalf("room a: %+v", recs)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"danmaku_audit_records_total", nil, 5},
		{"danmaku_audit_records_total", []string{"decision", "dropped", "reason", "duplicate"}, 1},
		{"danmaku_audit_records_written_total", nil, 5},
		{"danmaku_audit_objects_written_total", []string{"kind", "minute"}, 2},
		{"danmaku_audit_held_bytes", nil, 0},
	} {
		if got := metric(t, f.reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestRecorderEarlyParts: a batch that reaches MaxPartBytes is written at
// once as a part of its minute; nothing is lost or repeated.
func TestRecorderEarlyParts(t *testing.T) {
	f := newFixture(t, audit.Config{MaxPartBytes: 1000})
	ctx := context.Background()
	now := f.clk.Now()
	for i := range 100 {
		f.rec.Record(rec(now, "a", fmt.Sprint("u", i), "some comment text", audit.Stored, ""))
	}
	if err := f.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.keys(t)); n < 5 {
		t.Fatalf("%d objects written early, want one per ~1000 bytes", n)
	}
	f.clk.Advance(time.Minute)
	if err := f.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _ := f.read(t, audit.Query{Room: "a", Since: t0})
	if len(recs) != 100 {
		t.Fatalf("read %d records, want 100", len(recs))
	}
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.User] = true
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct records", len(seen))
	}
	if metric(t, f.reg, "danmaku_audit_objects_written_total", "kind", "early") == 0 {
		t.Fatal("no early part counted")
	}
}

// TestRecorderOverflowIsCounted: with the store down and memory full, new
// records are lost, but counted, and the gap is written into the room's
// next object once the store is back.
func TestRecorderOverflowIsCounted(t *testing.T) {
	f := newFixture(t, audit.Config{MaxPartBytes: 400, MaxBytes: 2000})
	ctx := context.Background()
	f.store.fail.Store(true)
	now := f.clk.Now()
	for i := range 100 {
		f.rec.Record(rec(now, "a", fmt.Sprint("u", i), "some comment text", audit.Stored, ""))
	}
	if err := f.rec.Flush(ctx); err == nil {
		t.Fatal("Flush against a failing store reported no error")
	}
	lost := metric(t, f.reg, "danmaku_audit_records_lost_total", "reason", "overflow")
	if lost == 0 || lost == 100 {
		t.Fatalf("lost %v of 100, want some kept up to MaxBytes and the rest counted", lost)
	}
	if held := metric(t, f.reg, "danmaku_audit_held_bytes"); held > 2000 {
		t.Fatalf("held %v bytes, bound 2000", held)
	}
	f.store.fail.Store(false)
	f.clk.Advance(time.Minute)
	if err := f.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, gap := f.read(t, audit.Query{Room: "a", Since: t0})
	if float64(len(recs))+float64(gap) != 100 || float64(gap) != lost {
		t.Fatalf("read %d records and a gap of %d; lost counter %v: want 100 in all", len(recs), gap, lost)
	}
	if metric(t, f.reg, "danmaku_audit_flush_errors_total") == 0 {
		t.Fatal("flush errors not counted")
	}
}

// TestRecorderShutdown writes the current minute at once; records after it
// are counted; a second Shutdown is harmless.
func TestRecorderShutdown(t *testing.T) {
	f := newFixture(t, audit.Config{})
	ctx := context.Background()
	f.rec.Record(rec(f.clk.Now(), "a", "u", "bye", audit.Stored, ""))
	if err := f.rec.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.rec.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, _ := f.read(t, audit.Query{Room: "a", Since: t0}); len(recs) != 1 {
		t.Fatalf("read %d records after shutdown, want 1", len(recs))
	}
	if metric(t, f.reg, "danmaku_audit_objects_written_total", "kind", "final") != 1 {
		t.Fatal("final object not counted")
	}
	f.rec.Record(rec(f.clk.Now(), "a", "u", "late", audit.Stored, ""))
	if metric(t, f.reg, "danmaku_audit_records_lost_total", "reason", "closed") != 1 {
		t.Fatal("a record after shutdown was not counted")
	}
}

// TestRecorderShutdownStoreDown: what cannot be written by the end of the
// shutdown is counted and reported, not dropped in silence.
func TestRecorderShutdownStoreDown(t *testing.T) {
	f := newFixture(t, audit.Config{})
	f.store.fail.Store(true)
	for i := range 7 {
		f.rec.Record(rec(f.clk.Now(), "a", fmt.Sprint("u", i), "x", audit.Stored, ""))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shutdown deadline has passed
	err := f.rec.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "7 records") {
		t.Fatalf("Shutdown: %v, want 7 records reported unwritten", err)
	}
	if metric(t, f.reg, "danmaku_audit_records_lost_total", "reason", "shutdown") != 7 {
		t.Fatal("unwritten records not counted")
	}
}

// TestRecorderRun: Run writes an early part without waiting for the
// minute, and the minute's rest once it ends.
func TestRecorderRun(t *testing.T) {
	f := newFixture(t, audit.Config{MaxPartBytes: 200, Writers: 2})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.rec.Run(ctx) }()
	for i := range 3 {
		f.rec.Record(rec(f.clk.Now(), "a", fmt.Sprint("u", i), strings.Repeat("x", 80), audit.Stored, ""))
	}
	poll(t, func() bool { return len(f.keys(t)) >= 1 })
	// The minute ends on the fake clock; Run's ticker (1 s) seals it on the
	// first tick after. The wait moves the clock a tick at a time, so it
	// never depends on Run having armed its ticker before the minute ended.
	f.clk.Advance(time.Minute)
	poll(t, func() bool {
		f.clk.Advance(time.Second)
		return metric(t, f.reg, "danmaku_audit_records_written_total") == 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := f.rec.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func poll(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.For(t, "the recorder", cond)
}

// TestRecorderConcurrent: many writers, then shutdown: every record is in
// the trail exactly once.
func TestRecorderConcurrent(t *testing.T) {
	f := newFixture(t, audit.Config{MaxPartBytes: 4096})
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				f.rec.Record(rec(f.clk.Now(), fmt.Sprint("r", i%3), fmt.Sprintf("u%d-%d", w, i), "x", audit.Stored, ""))
				if i%100 == 0 {
					f.rec.Flush(context.Background())
				}
			}
		})
	}
	wg.Wait()
	if err := f.rec.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, room := range []string{"r0", "r1", "r2"} {
		recs, _ := f.read(t, audit.Query{Room: room, Since: t0})
		for _, r := range recs {
			seen[r.User]++
		}
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct records, want %d", len(seen), writers*each)
	}
	for u, n := range seen {
		if n != 1 {
			t.Fatalf("%s recorded %d times", u, n)
		}
	}
}

// TestRead: records of several nodes and minutes come back in time order,
// filtered by time and user; a record recorded late (in the next minute's
// object) is sorted among its own minute's.
func TestRead(t *testing.T) {
	store := objstore.NewMemoryStore()
	ctx := context.Background()
	put := func(node string, minute time.Time, recs ...audit.Record) {
		t.Helper()
		b, err := audit.EncodeRecords(audit.Header{Room: "r", Node: node, Minute: audit.MinuteName(minute)}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(ctx, audit.ObjectKey("r", minute, node, "n", 1), b, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m0, m1, m2 := t0, t0.Add(time.Minute), t0.Add(2*time.Minute)
	put("a", m0, rec(m0.Add(5*time.Second), "r", "u1", "1", audit.Stored, ""), rec(m0.Add(50*time.Second), "r", "u2", "4", audit.Stored, ""))
	put("b", m0, rec(m0.Add(10*time.Second), "r", "u1", "2", audit.Dropped, "duplicate"))
	// Late: a record of m0's last moment in b's m1 object.
	put("b", m1, rec(m0.Add(59*time.Second), "r", "u2", "5", audit.Stored, ""), rec(m1.Add(time.Second), "r", "u1", "6", audit.Stored, ""))
	put("a", m1, rec(m0.Add(20*time.Second), "r", "u3", "3", audit.Masked, "sensitive_word"))
	put("a", m2, rec(m2.Add(time.Second), "r", "u1", "7", audit.Stored, ""))
	// Another room whose name extends this one's is not read.
	b, _ := audit.EncodeRecords(audit.Header{Room: "r2"}, []audit.Record{rec(m0, "r2", "u1", "x", audit.Stored, "")})
	store.Put(ctx, audit.ObjectKey("r2", m0, "a", "n", 1), b, objstore.PutOptions{})

	texts := func(q audit.Query) string {
		var out []string
		err := audit.Read(ctx, store, q, func(r audit.Record) error { out = append(out, r.Text); return nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "")
	}
	for _, c := range []struct {
		name string
		q    audit.Query
		want string
	}{
		{"all", audit.Query{Room: "r", Since: m0}, "1234567"},
		{"since", audit.Query{Room: "r", Since: m0.Add(15 * time.Second)}, "34567"},
		{"since a later minute", audit.Query{Room: "r", Since: m1}, "67"},
		{"until", audit.Query{Room: "r", Since: m0, Until: m1}, "12345"},
		{"user", audit.Query{Room: "r", Since: m0, User: "u1"}, "1267"},
		{"empty range", audit.Query{Room: "r", Since: m2.Add(time.Hour)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := texts(c.q); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	if err := audit.Read(ctx, store, audit.Query{Room: "../x", Since: m0}, func(audit.Record) error { return nil }, nil); err == nil {
		t.Fatal("a bad room was read")
	}
	if err := audit.Read(ctx, store, audit.Query{Room: "r", Since: m1, Until: m0}, func(audit.Record) error { return nil }, nil); err == nil {
		t.Fatal("Until before Since was read")
	}
	// A corrupt object is an error naming its key, not a silent hole.
	store.Put(ctx, audit.ObjectKey("r", m1, "c", "n", 1), []byte("garbage"), objstore.PutOptions{})
	err := audit.Read(ctx, store, audit.Query{Room: "r", Since: m0}, func(audit.Record) error { return nil }, nil)
	if !errors.Is(err, audit.ErrBadObject) || !strings.Contains(err.Error(), "audit/r/20261201T1108Z/c.n.000001") {
		t.Fatalf("corrupt object: %v", err)
	}
}

// TestSweep deletes what is past the retention, in every room, and keeps
// the rest; on a directory store too.
func TestSweep(t *testing.T) {
	for _, s := range []struct {
		name  string
		store func(t *testing.T) audit.ReadStore
	}{
		{"memory", func(*testing.T) audit.ReadStore { return objstore.NewMemoryStore() }},
		{"dir", func(t *testing.T) audit.ReadStore {
			d, err := objstore.NewDirStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(s.name, func(t *testing.T) {
			store := s.store(t)
			clk := clock.NewFake(t0)
			reg := prometheus.NewRegistry()
			r, err := audit.New(audit.Config{Store: store, Node: "n", Retention: time.Hour, Clock: clk, Registerer: reg, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var want []string
			for _, room := range []string{"a", "a-b", "ab", "b"} {
				for _, age := range []time.Duration{3 * time.Hour, 62 * time.Minute, 61 * time.Minute, 30 * time.Minute, 0} {
					m := t0.Add(-age)
					key := audit.ObjectKey(room, m, "n", "x", 1)
					store.Put(ctx, key, []byte("x"), objstore.PutOptions{})
					// 61 minutes old: its minute ended exactly an hour
					// ago, and is kept; 62: deleted.
					if age < 62*time.Minute {
						want = append(want, key)
					}
				}
			}
			store.Put(ctx, "audit/stray", []byte("x"), objstore.PutOptions{})
			want = append(want, "audit/stray")
			slices.Sort(want)
			n, err := r.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			store.List(ctx, audit.Prefix, "", func(k string) bool { got = append(got, k); return true })
			if n != 8 || !slices.Equal(got, want) {
				t.Fatalf("deleted %d, kept\n%q\nwant\n%q", n, got, want)
			}
			if testutil.ToFloat64(counterOf(t, reg, "danmaku_audit_objects_deleted_total")) != 8 {
				t.Fatal("deletions not counted")
			}
		})
	}
}

func counterOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
	c.Add(metric(t, reg, name))
	return c
}

func TestNewChecks(t *testing.T) {
	mem := objstore.NewMemoryStore()
	for name, cfg := range map[string]audit.Config{
		"no store":               {Node: "n"},
		"no node":                {Store: mem},
		"negative":               {Store: mem, Node: "n", MaxBytes: -1},
		"part over the bound":    {Store: mem, Node: "n", MaxPartBytes: 10, MaxBytes: 5},
		"sweeping an unlistable": {Store: struct{ objstore.Store }{mem}, Node: "n"},
	} {
		if _, err := audit.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := audit.New(audit.Config{Store: struct{ objstore.Store }{mem}, Node: "n", SweepEvery: -1}); err != nil {
		t.Fatalf("an unlistable store with no sweep: %v", err)
	}
	r, err := audit.New(audit.Config{Store: mem, Node: "ip-10-0-0-1.ec2:7702/x"})
	if err != nil || r.Node() != "ip-10-0-0-1_ec2_7702_x" {
		t.Fatalf("node %q, %v", r.Node(), err)
	}
}

// BenchmarkRecord is the request path's cost of one comment's record.
func BenchmarkRecord(b *testing.B) {
	// Parts are sealed at the default size and left queued (no writer), so
	// this is the request path alone: encode, append, seal.
	r, err := audit.New(audit.Config{Store: objstore.NewMemoryStore(), Node: "n", MaxBytes: 1 << 40, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	rooms := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		room := rooms[next.Add(1)%int64(len(rooms))]
		for pb.Next() {
			r.Record(audit.Record{At: now, Room: room, User: "user-12345", Text: "这是一条弹幕 comment text", Decision: audit.Stored})
		}
	})
}
