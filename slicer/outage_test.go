package slicer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/breaker"
	"danmaku/internal/breaker/breakertest"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/slicer"
	"danmaku/slicer/slicertest"
)

// timedStore records every call of the store it wraps in a Timeline.
type timedStore struct {
	objstore.Store
	tl *breakertest.Timeline
	// deadlines counts the calls ended by a timeout (their attempt's or
	// their context's deadline).
	deadlines *atomic.Int64
}

// record adds a call to the Timeline and counts it if a deadline ended it.
func (s timedStore) record(start time.Time, err error) {
	s.tl.Record(start, answer(err))
	if breakertest.EndedByDeadline(err) {
		s.deadlines.Add(1)
	}
}

func (s timedStore) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	start := time.Now()
	etag, err := s.Store.Put(ctx, key, body, opts)
	s.record(start, err)
	return etag, err
}

func (s timedStore) Get(ctx context.Context, key string) (*objstore.Object, error) {
	start := time.Now()
	obj, err := s.Store.Get(ctx, key)
	s.record(start, err)
	return obj, err
}

// answer is nil for the store's answers (not found, a failed condition):
// the server worked.
func answer(err error) error {
	if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrPrecondition) {
		return nil
	}
	return err
}

// TestS3Outage takes object storage away for DANMAKU_OUTAGE (default 4 s)
// while a slicer writes four rooms with a steady flow of gifts, in two
// ways: versitygw stopped (connections refused) and the path to it cut
// (a proxy that swallows every byte: requests hang until their deadline).
// The S3 breaker opens and the slots wait, read, in each room's queue of
// unwritten slots; once the server is back the breaker closes and every
// slot's segment is written, in order, with every gift exactly once. A cut
// path's hung calls are ended by their deadline (counted by their errors;
// how long the longest took is a figure: a starved test process adds its
// own delay to it).
func TestS3Outage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an outage of seconds against real servers")
	}
	for _, mode := range []string{"stopped", "cut"} {
		t.Run(mode, func(t *testing.T) { runS3Outage(t, mode) })
	}
}

func runS3Outage(t *testing.T, mode string) {
	outage := breakertest.Outage(t, 4*time.Second)
	rdb := redistest.Client(t)
	env, s3srv := testenv.S3Restartable(t)
	var proxy *breakertest.Proxy
	if mode == "cut" {
		proxy = breakertest.NewProxy(t, strings.TrimPrefix(env.Endpoint, "http://"))
		env.Endpoint = "http://" + proxy.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	// Attempts of 1 s, so that a cut path fails within the test's seconds
	// (production: 5 s); the breaker's own settings are the defaults.
	const callTimeout = time.Second
	s3, err := objstore.NewS3Store(ctx, objstore.S3Config{
		Bucket: env.Bucket, Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey, Timeout: callTimeout, Prefix: "outage/",
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := breaker.For(breaker.Config{Dep: "s3", Target: env.Endpoint + "/" + env.Bucket})
	var (
		tl        breakertest.Timeline
		deadlines atomic.Int64
	)
	objects := timedStore{Store: s3, tl: &tl, deadlines: &deadlines}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := slicer.New(slicer.Config{Streams: streams, Objects: objects, Lease: slicer.NewRedisLease(rdb), NodeID: "solo", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopSlicer := context.WithCancel(ctx)
	slicerDone := make(chan struct{})
	go func() { defer close(slicerDone); _ = s.Run(runCtx) }()
	defer func() { stopSlicer(); <-slicerDone }()

	var producers []*slicertest.Producer
	prodCtx, stopProducers := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	for i := range 4 {
		p := &slicertest.Producer{Store: streams, Room: fmt.Sprintf("outage-%s-%d", mode, i)}
		producers = append(producers, p)
		prodWG.Go(func() { p.Run(prodCtx, 50*time.Millisecond) })
	}

	time.Sleep(3 * time.Second) // the producers' load before the outage: a phase of the scenario, not synchronisation
	tl.Cut()
	if proxy != nil {
		proxy.Cut()
	} else {
		s3srv.Stop()
	}
	// The outage lasts its time, and on until the breaker has opened: on
	// a busy machine the failures that open it can come late (guard: a
	// breaker that never opens fails the test below, not a speed).
	var opened time.Duration
	for start := time.Now(); time.Since(start) < outage || (opened == 0 && time.Since(start) < time.Minute); time.Sleep(10 * time.Millisecond) {
		if opened == 0 && b.State() == breaker.Open {
			opened = time.Since(start)
		}
	}
	if proxy != nil {
		proxy.Restore()
	} else {
		s3srv.Start()
	}
	tl.Restored()
	restored := time.Now()
	var closed time.Duration
	for deadline := restored.Add(time.Minute); closed == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// A late fifth failure (a busy machine) may open it just now.
		if opened == 0 && b.State() == breaker.Open {
			opened = outage + time.Since(restored)
		}
		if opened != 0 && b.State() == breaker.Closed && tl.Figures().ClosedAfter > 0 {
			closed = time.Since(restored)
		}
	}
	time.Sleep(2 * time.Second) // load after the recovery, so that the last segments carry it: a phase, not synchronisation
	stopProducers()
	prodWG.Wait()

	// The segments are read back through a store of the same server with
	// a guard for a timeout, not the slicer's 1 s attempts: a starved test
	// process once saw a read of a written segment time out.
	verify, err := objstore.NewS3Store(ctx, objstore.S3Config{
		Bucket: env.Bucket, Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey, Timeout: 30 * time.Second, Prefix: "outage/",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range producers {
		accepted, last := p.Accepted()
		first, lastSec := slicertest.VerifySegments(t, ctx, verify, p.Room, accepted, last)
		t.Logf("%s: %d gifts, slots %d..%d (%d segments), every gift exactly once", p.Room, len(accepted), first, lastSec, lastSec-first+1)
	}
	f := tl.Figures()
	t.Logf("s3 %s for %v, 4 rooms: breaker open after %v, closed %v after recovery; store calls: %v",
		mode, outage, opened.Round(time.Millisecond), closed.Round(time.Millisecond), f)
	if opened == 0 {
		t.Errorf("the S3 breaker never opened")
	}
	if closed == 0 {
		t.Errorf("the S3 breaker did not close after recovery")
	}
	t.Logf("longest store call of the outage %v (deadline %v; a figure, not asserted); %d calls ended by their deadline", f.Longest, callTimeout, deadlines.Load())
	if mode == "cut" && deadlines.Load() == 0 {
		t.Errorf("no call to the cut path was ended by its deadline")
	}
}
