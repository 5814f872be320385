package slicer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
	"danmaku/slicer"
	"danmaku/slicer/slicertest"
)

// TestClusterFailover fails over the Redis Cluster master that holds a room
// while gifts are appended to it through the gift log at a steady rate and
// a slicer writes its segments:
//
//   - graceful: CLUSTER FAILOVER on the master's replica (the master stops
//     writes, the replica catches up, then takes over);
//   - kill: SIGKILL of the master right after it acknowledged a gift; its
//     replica is promoted after cluster-node-timeout (1 s).
//
// The gift log runs with WaitReplicas 1, so a gift is confirmed only once a
// replica has it: what a killed master acknowledged is on the replica that
// replaces it. (Redis replicates asynchronously; without the WAIT, a gift
// acknowledged in the last moment before the kill can be lost with the
// master, and the business server, answered 200, never sends it again.)
// For the kill the cluster has two replicas per master, so that the
// promoted one still has a replica to confirm gifts with.
//
// Afterwards every accepted gift is in exactly one segment and seq has no
// gap. The takeover times are logged for docs/benchmarks.md: failover →
// first gift accepted after it, and → first segment of a slot that ended
// after it.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two Redis Clusters through a failover, ~15 s each")
	}
	for _, tc := range []struct {
		name     string
		replicas int
	}{
		{"graceful", 1},
		{"kill", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testClusterFailover(t, tc.name, tc.replicas, 1)
		})
	}
}

func testClusterFailover(t *testing.T, mode string, replicas, waitReplicas int) {
	const (
		room   = "clusterfailover"
		before = 3 * time.Second // writing normally before the failover
		after  = 3 * time.Second // writing after the first segment past it
		every  = 20 * time.Millisecond
	)
	cl := testenv.RedisClusterWith(t, testenv.ClusterConfig{NodeTimeout: time.Second, Replicas: replicas})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() {
			t.Logf("slicer log:\n%s", logs)
		}
	}()
	// The slicer and the ingest are separate clients, as they are separate
	// processes in a deployment, all connected as production connects; the
	// gift log has a client of its own, so that it must find the new
	// master by itself, not thanks to the barrage's commands.
	connect := func() redis.UniversalClient {
		c, err := redisx.Connect(ctx, redisx.Config{URL: cl.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rdb, irdb, grdb := connect(), connect(), connect()
	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	istreams, err := stream.NewRedisStore(stream.RedisConfig{Client: irdb, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	gstreams, err := stream.NewRedisStore(stream.RedisConfig{Client: grdb, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	gifts, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: grdb, Streams: gstreams, Logger: logger, WaitReplicas: waitReplicas})
	if err != nil {
		t.Fatal(err)
	}
	objects := &putLog{Store: objstore.NewMemoryStore()}
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

	p := &giftProducer{log: gifts, room: room}
	prodCtx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); p.run(prodCtx, every) }()
	defer func() { stopProducer(); <-prodDone }()
	// Barrage too, through the stream store's pipelined XADDs, so that
	// their path crosses the failover as well (barrage may be dropped, so
	// it is not checked in the segments).
	barrageDone := make(chan int)
	go func() {
		failed := 0
		for {
			select {
			case <-prodCtx.Done():
				barrageDone <- failed
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := istreams.Append(ctx, stream.Key{Room: room, Lane: stream.Barrage}, []wire.Message{{Kind: wire.KindBarrage, User: "v", Text: "hi"}}); err != nil {
				failed++
			}
		}
	}()

	time.Sleep(before) // load before the failover: a phase of the scenario, not synchronisation
	master := cl.MasterOf(t, redisx.RoomKey(room, "live"))
	var failedAt time.Time
	switch mode {
	case "graceful":
		replica := cl.ReplicaOf(t, master)
		failedAt = time.Now()
		replica.Failover(t)
		t.Logf("CLUSTER FAILOVER on %s, replica of the room's master %s", replica.Addr, master.Addr)
	case "kill":
		id, at := p.afterNextAccept(ctx, master.Kill)
		if id == "" {
			t.Fatal("no gift was accepted before the kill")
		}
		failedAt = at
		t.Logf("killed the room's master %s right after it acknowledged gift %s", master.Addr, id)
	}

	// Takeover: the first gift accepted, and the first segment written of
	// a slot that ended, after the failover. Once the cluster has settled,
	// both must follow within a few attempts: 20 s is a generous bound on
	// that, far below the minute after which go-redis would re-read the
	// slot map by itself.
	cl.WaitHealthy(t)
	var firstGift, firstSegment time.Time
	for settled := time.Now(); firstGift.IsZero() || firstSegment.IsZero(); {
		if firstGift.IsZero() {
			firstGift = p.firstAcceptAfter(failedAt)
		}
		if firstSegment.IsZero() {
			firstSegment = objects.firstSegmentAfter(room, failedAt)
		}
		if time.Since(settled) > 20*time.Second {
			t.Fatalf("20 s after the cluster settled: first gift accepted %v, first segment %v (zero: none yet)", firstGift, firstSegment)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(after) // load after the failover: a phase of the scenario, not synchronisation
	stopProducer()
	<-prodDone
	barrageFailed := <-barrageDone

	accepted, last := p.accepted()
	gap := p.longestGap()
	first, lastSec := slicertest.VerifySegments(t, ctx, objects, room, accepted, last)
	t.Logf("%s failover, WAIT %d: takeover %d ms to the first accepted gift, %d ms to the first segment of a slot that ended after it; "+
		"longest wait between two accepted gifts %d ms; %d gift attempts and %d barrage appends failed on the way; "+
		"%d gifts over seconds %d..%d, each exactly once",
		mode, waitReplicas, firstGift.Sub(failedAt).Milliseconds(), firstSegment.Sub(failedAt).Milliseconds(),
		gap.Milliseconds(), p.failures(), barrageFailed, len(accepted), first, lastSec)
}

// giftProducer appends a gift every tick through a gift log, as a business
// server calls the gift API: each order is retried after an error until it
// is accepted (an error may be ambiguous; the order id makes the retry
// safe), and the id it was accepted under is recorded.
type giftProducer struct {
	log  ingest.GiftLog
	room string

	mu       sync.Mutex
	ids      []string
	at       []time.Time
	failed   int
	hook     func()
	hookDone chan hooked
}

type hooked struct {
	id string
	at time.Time
}

func (p *giftProducer) run(ctx context.Context, every time.Duration) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		m := wire.Message{Kind: wire.KindGift, User: fmt.Sprintf("fan%d", i%10), Gift: "rose", Value: 10}
		order := fmt.Sprintf("o%d", i)
		for {
			// Background, not ctx: an order once started is retried until
			// accepted, even while the producer is being stopped.
			actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			id, _, err := p.log.AppendGift(actx, p.room, order, m)
			cancel()
			if err == nil {
				p.accept(id)
				break
			}
			p.mu.Lock()
			p.failed++
			p.mu.Unlock()
			time.Sleep(every) // the producer's retry pacing against a real Cluster
		}
	}
}

func (p *giftProducer) accept(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.ids = append(p.ids, id)
	p.at = append(p.at, now)
	if p.hook != nil {
		p.hook()
		p.hookDone <- hooked{id, time.Now()}
		p.hook = nil
	}
}

// afterNextAccept runs fn right after the next gift is accepted, before
// the producer sends another, and returns that gift's id and when fn
// returned.
func (p *giftProducer) afterNextAccept(ctx context.Context, fn func()) (string, time.Time) {
	ch := make(chan hooked, 1)
	p.mu.Lock()
	p.hook, p.hookDone = fn, ch
	p.mu.Unlock()
	select {
	case h := <-ch:
		return h.id, h.at
	case <-ctx.Done():
		return "", time.Time{}
	}
}

func (p *giftProducer) accepted() (ids []string, last string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) > 0 {
		last = p.ids[len(p.ids)-1]
	}
	return append([]string(nil), p.ids...), last
}

func (p *giftProducer) failures() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// firstAcceptAfter returns when the first gift after t was accepted, zero
// if none was yet.
func (p *giftProducer) firstAcceptAfter(t time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.at {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// longestGap returns the longest time between two consecutive accepts.
func (p *giftProducer) longestGap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(p.at); i++ {
		gap = max(gap, p.at[i].Sub(p.at[i-1]))
	}
	return gap
}

// putLog is an object store that remembers when each segment was written.
type putLog struct {
	objstore.Store

	mu   sync.Mutex
	puts []segmentPut
}

type segmentPut struct {
	key string
	at  time.Time
}

// Put implements objstore.Store.
func (l *putLog) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	etag, err := l.Store.Put(ctx, key, body, opts)
	if err == nil {
		l.mu.Lock()
		l.puts = append(l.puts, segmentPut{key, time.Now()})
		l.mu.Unlock()
	}
	return etag, err
}

// firstSegmentAfter returns when the first segment of room's slot that
// ended after t was written, zero if none was yet. Such a slot is written
// only after a read of the room's streams that started past its end: its
// write shows that the slicer reads the room again.
func (l *putLog) firstSegmentAfter(room string, t time.Time) time.Time {
	prefix := strings.TrimSuffix(wire.SegmentKey(room, 0), "0.msgpack")
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.puts {
		var sec int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(p.key, prefix), "%d.msgpack", &sec); err != nil || !strings.HasPrefix(p.key, prefix) {
			continue
		}
		if time.Unix(sec+1, 0).After(t) {
			return p.at
		}
	}
	return time.Time{}
}
