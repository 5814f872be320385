package slicer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/internal/wire"
	"danmaku/slicer"
)

// producer appends gifts (some identical within a second, so they merge) and
// barrage to a room and remembers every gift the store accepted.
type producer struct {
	store stream.Store
	room  string

	mu       sync.Mutex
	accepted []string // gift ids
	last     string
}

func (p *producer) run(ctx context.Context, t *testing.T, every time.Duration) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		gifts := []wire.Message{
			{Kind: wire.KindGift, User: fmt.Sprintf("fan%d", i%7), Gift: "rose", Value: 10, Order: fmt.Sprintf("o%d", i)},
			{Kind: wire.KindGift, User: "whale", Gift: "rocket", Value: 5000, Order: fmt.Sprintf("w%d", i)},
		}
		out, err := p.store.Append(context.Background(), stream.Key{Room: p.room, Lane: stream.Live}, gifts)
		if err != nil {
			// Not accepted: the ingest would have answered 503 and the
			// business server retried. Nothing to account for.
			continue
		}
		_, _ = p.store.Append(context.Background(), stream.Key{Room: p.room, Lane: stream.Barrage}, []wire.Message{{Kind: wire.KindBarrage, User: "v", Text: "hi"}})
		p.mu.Lock()
		for _, m := range out {
			p.accepted = append(p.accepted, m.ID)
			p.last = m.ID
		}
		p.mu.Unlock()
	}
}

// verifySegments reads every segment of room up to the manifest's second
// once the manifest has passed lastID's second, and checks: no gap in
// seconds, seq +1 per second, every accepted gift exactly once.
func verifySegments(t *testing.T, ctx context.Context, objects objstore.Store, room string, accepted []string, lastID string) (first, last int64) {
	t.Helper()
	lastSec, err := wire.SecondOf(lastID)
	if err != nil {
		t.Fatal(err)
	}
	var man *wire.Manifest
	for {
		if obj, err := objects.Get(ctx, wire.ManifestKey(room)); err == nil {
			if man, err = wire.DecodeManifest(obj.Body); err != nil {
				t.Fatal(err)
			}
			if man.Second > lastSec+1 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("manifest never passed second %d (at %+v)", lastSec, man)
		case <-time.After(100 * time.Millisecond):
		}
	}
	count := map[string]int{}
	sec, seq := man.Second, man.Seq
	for ; ; sec-- {
		obj, err := objects.Get(ctx, wire.SegmentKey(room, sec))
		if errors.Is(err, objstore.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seg, err := wire.DecodeSegment(obj.Body)
		if err != nil {
			t.Fatalf("second %d: %v", sec, err)
		}
		if seg.Seq != seq || seg.Second != sec {
			t.Fatalf("second %d has seq %d, want %d", sec, seg.Seq, seq)
		}
		for _, m := range seg.Messages {
			if m.Kind != wire.KindGift {
				continue
			}
			ids := m.Merged
			if len(ids) == 0 {
				ids = []string{m.ID}
			}
			for _, id := range ids {
				count[id]++
			}
		}
		if seq == 1 {
			break
		}
		seq--
	}
	if seq != 1 {
		t.Fatalf("segments stop at second %d with seq %d: a gap before it", sec+1, seq)
	}
	for _, id := range accepted {
		if count[id] != 1 {
			t.Fatalf("gift %s appears %d times", id, count[id])
		}
	}
	if len(count) != len(accepted) {
		t.Fatalf("segments hold %d gifts, %d were accepted", len(count), len(accepted))
	}
	return sec, man.Second
}

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

	p := &producer{store: streams, room: "outage"}
	prodCtx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); p.run(prodCtx, t, 50*time.Millisecond) }()

	time.Sleep(3 * time.Second)
	s3srv.Stop()
	t.Log("versitygw stopped")
	time.Sleep(10 * time.Second)
	s3srv.Start()
	t.Log("versitygw started again")
	time.Sleep(2 * time.Second)
	stopProducer()
	<-prodDone

	p.mu.Lock()
	accepted, last := append([]string(nil), p.accepted...), p.last
	p.mu.Unlock()
	first, lastSec := verifySegments(t, ctx, objects, "outage", accepted, last)
	t.Logf("%d gifts, seconds %d..%d (%d segments), every gift exactly once", len(accepted), first, lastSec, lastSec-first+1)
}
