package slicer_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/internal/objstore"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
	"danmaku/slicer"
	"danmaku/slicer/slicertest"
)

// TestRedisRestart kills Redis (SIGKILL, a crash) while a slicer writes a
// room with a steady flow of gifts, keeps it down for 5 s — longer than the
// lease, so the leader loses it — and starts it again from its append-only
// file (fsynced on every write, as a managed Redis keeps acknowledged
// writes). Every second's segment is written, seq has no gap, and every gift
// Redis accepted is in exactly one segment: those the slicer had read but not
// settled (pending in the consumer group), those it had not read yet, and the
// ones accepted immediately before the crash.
func TestRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ~15 s against real servers")
	}
	const (
		room     = "redisrestart"
		before   = 3 * time.Second // writing normally before the crash
		downtime = 5 * time.Second // > the 2 s lease: the leader must step down
		after    = 4 * time.Second // writing after Redis is back
	)
	addr, redisSrv := testenv.RedisRestartable(t)
	env := testenv.S3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()

	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() { t.Logf("slicer log:\n%s", logs) }()

	// The slicer and the producer (standing in for ingest) are separate
	// clients, as they are separate processes in a deployment; both come
	// from redisx.Connect, so they never retry a command on their own and
	// reconnect by themselves once Redis is back.
	connect := func() redis.UniversalClient {
		c, err := redisx.Connect(ctx, redisx.Config{URL: addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rdb, prdb := connect(), connect()
	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ingest, err := stream.NewRedisStore(stream.RedisConfig{Client: prdb, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewS3Store(ctx, objstore.S3Config{
		Bucket: env.Bucket, Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey, Timeout: 2 * time.Second, Prefix: "redis-restart/",
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := slicer.New(slicer.Config{
		Streams: streams, Objects: objects,
		Lease: slicer.NewRedisLease(rdb), Settings: slicer.NewRedisSettings(rdb),
		NodeID: "solo", Logger: logger, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopSlicer := context.WithCancel(ctx)
	slicerDone := make(chan struct{})
	go func() { defer close(slicerDone); _ = s.Run(runCtx) }()
	defer func() { stopSlicer(); <-slicerDone; t.Logf("slicer metrics: %s", counters(reg)) }()

	gate := &crashGate{Store: ingest}
	p := &slicertest.Producer{Store: gate, Room: room}
	prodCtx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); p.Run(prodCtx, 50*time.Millisecond) }()
	defer func() { stopProducer(); <-prodDone }()

	time.Sleep(before) // load before Redis goes down: a phase, not synchronisation
	justBefore := gate.crashAfterNextAccept(ctx, redisSrv.Kill)
	if justBefore == nil {
		t.Fatal("no append was accepted before the crash")
	}
	t.Logf("redis killed right after accepting %s", ids(justBefore))
	time.Sleep(downtime) // Redis stays down this long: the outage under test
	redisSrv.Start()
	restarted := time.Now()
	t.Log("redis started again")
	time.Sleep(after) // load after the restart: a phase, not synchronisation
	stopProducer()
	<-prodDone

	accepted, last := p.Accepted()
	if sec, err := wire.SecondOf(last); err != nil || sec < restarted.Unix() {
		t.Fatalf("no gift was accepted after the restart (last %s): the clients did not reconnect", last)
	}
	first, lastSec := slicertest.VerifySegments(t, ctx, objects, room, accepted, last)
	t.Logf("%d gifts, seconds %d..%d (%d segments), every gift exactly once", len(accepted), first, lastSec, lastSec-first+1)
}

// crashGate is the producer's store. It lets the test crash Redis right
// after an append of gifts was acknowledged — the newest entries Redis has
// when it dies, which the slicer has not read yet — and never in the middle
// of an append: a gift whose XADD Redis ran but whose answer the crash cut
// off is stored without being accepted, which in production the gift log's
// order id settles on the business server's retry, but which this test's
// producer (plain appends, no order check) would count as a gift nobody
// accepted.
type crashGate struct {
	stream.Store

	mu      sync.Mutex
	crash   func()
	crashed chan []wire.Message
}

// Append implements stream.Store.
func (g *crashGate) Append(ctx context.Context, key stream.Key, msgs []wire.Message) ([]wire.Message, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out, err := g.Store.Append(ctx, key, msgs)
	if err == nil && key.Lane == stream.Live && g.crash != nil {
		g.crash()
		g.crash = nil
		g.crashed <- out
	}
	return out, err
}

// crashAfterNextAccept runs crash right after the next accepted append of
// gifts returns from Redis (before the producer sees it) and returns what
// that append stored; nil if none came before ctx ended.
func (g *crashGate) crashAfterNextAccept(ctx context.Context, crash func()) []wire.Message {
	ch := make(chan []wire.Message, 1)
	g.mu.Lock()
	g.crash, g.crashed = crash, ch
	g.mu.Unlock()
	select {
	case out := <-ch:
		return out
	case <-ctx.Done():
		return nil
	}
}

func ids(msgs []wire.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.ID)
	}
	return b.String()
}

// syncBuffer is a log destination shared by the slicer's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// counters renders the slicer's counters (name{labels}=value), for the log.
func counters(reg *prometheus.Registry) string {
	fams, err := reg.Gather()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s}=%g", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
