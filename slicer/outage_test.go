package slicer_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/slicer"
	"danmaku/slicer/slicertest"
)

// TestS3Outage stops versitygw for 10 s while a slicer writes a room with a
// steady flow of gifts, then starts it again: every second's segment is
// eventually written, in order, and no gift is lost or duplicated.
func TestS3Outage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ~20 s against real servers")
	}
	rdb := redistest.Client(t)
	env, s3srv := testenv.S3Restartable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewS3Store(ctx, objstore.S3Config{
		Bucket: env.Bucket, Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey, Timeout: 2 * time.Second, Prefix: "outage/",
	})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := slicer.New(slicer.Config{Streams: streams, Objects: objects, Lease: slicer.NewRedisLease(rdb), NodeID: "solo", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopSlicer := context.WithCancel(ctx)
	slicerDone := make(chan struct{})
	go func() { defer close(slicerDone); _ = s.Run(runCtx) }()
	defer func() { stopSlicer(); <-slicerDone }()

	p := &slicertest.Producer{Store: streams, Room: "outage"}
	prodCtx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); p.Run(prodCtx, 50*time.Millisecond) }()

	time.Sleep(3 * time.Second)
	s3srv.Stop()
	t.Log("versitygw stopped")
	time.Sleep(10 * time.Second)
	s3srv.Start()
	t.Log("versitygw started again")
	time.Sleep(2 * time.Second)
	stopProducer()
	<-prodDone

	accepted, last := p.Accepted()
	first, lastSec := slicertest.VerifySegments(t, ctx, objects, "outage", accepted, last)
	t.Logf("%d gifts, seconds %d..%d (%d segments), every gift exactly once", len(accepted), first, lastSec, lastSec-first+1)
}
