package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stack/stacktest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/slicer/slicertest"
)

// s3Tap is a reverse proxy in front of the S3 server that sees every segment
// PUT of one slicer: it records when the first one happened, can hold the
// answer of each (the write is applied at S3, the slicer does not know yet),
// and reports each applied PUT on a channel.
type s3Tap struct {
	srv     *httptest.Server
	hold    time.Duration
	applied chan struct{}

	mu    sync.Mutex
	first time.Time
}

func newS3Tap(t *testing.T, target string, hold time.Duration) *s3Tap {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tap := &s3Tap{hold: hold, applied: make(chan struct{}, 1)}
	rp := httputil.NewSingleHostReverseProxy(u)
	// The SigV4 signature covers the Host header; NewSingleHostReverseProxy
	// keeps the client's Host, which is what the slicer signed.
	rp.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/s/") {
			return nil
		}
		tap.mu.Lock()
		if tap.first.IsZero() {
			tap.first = time.Now()
		}
		tap.mu.Unlock()
		select {
		case tap.applied <- struct{}{}:
		default:
		}
		time.Sleep(tap.hold)
		return nil
	}
	tap.srv = httptest.NewServer(rp)
	t.Cleanup(tap.srv.Close)
	return tap
}

func (tap *s3Tap) firstPut() time.Time {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.first
}

// TestSlicerFailover is issue 3's failover acceptance: two slicer processes
// against real Redis and versitygw; the leader is killed with SIGKILL while a
// segment PUT is in flight (applied at S3, answer not yet back). Every second
// has exactly one segment, seq is gap-free, and every accepted gift appears
// exactly once. The takeover time (kill → the standby's first segment PUT) is
// logged for docs/benchmarks.md.
func TestSlicerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two slicer processes for ~15 s")
	}
	bin := binary(t)
	redisAddr := testenv.Redis(t)
	rdb := redistest.Dial(t, redisConfig(redisAddr))
	env := testenv.S3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tapA := newS3Tap(t, env.Endpoint, 400*time.Millisecond)
	tapB := newS3Tap(t, env.Endpoint, 0)
	slicerCmd := func(name string, tap *s3Tap) (*exec.Cmd, *lines) {
		cmd := exec.Command(bin, "slicer", "-slicer", "127.0.0.1:0", "-node-id", name,
			"-redis", redisAddr, "-s3-bucket", env.Bucket, "-s3-endpoint", tap.srv.URL,
			"-s3-region", env.Region, "-s3-path-style", "-s3-prefix", "failover/", "-audit-dir", diskDir(t))
		cmd.Env = append(os.Environ(), "DANMAKU_S3_ACCESS_KEY="+env.AccessKey, "DANMAKU_S3_SECRET_KEY="+env.SecretKey, "DANMAKU_OPERATOR_KEYS=op-key")
		return cmd, startLines(t, cmd)
	}

	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	// Slicers lead only rooms of live events.
	if err := event.NewRedisStore(rdb).Create(ctx, stacktest.LiveEvent("failover", "failover")); err != nil {
		t.Fatal(err)
	}
	p := &slicertest.Producer{Store: streams, Room: "failover"}
	prodCtx, stopProducer := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); p.Run(prodCtx, 50*time.Millisecond) }()

	a, aOut := slicerCmd("slicer-a", tapA)
	aOut.waitFor(t, ctx, "leading room")
	b, bOut := slicerCmd("slicer-b", tapB)
	bOut.waitFor(t, ctx, "press Ctrl-C to stop")
	defer func() {
		_ = b.Process.Signal(syscall.SIGTERM)
		_ = b.Wait()
	}()

	// Let the leader write a few seconds, then kill it the moment one of
	// its segment PUTs has been applied but not answered.
	time.Sleep(3 * time.Second)
	drain(tapA.applied)
	select {
	case <-tapA.applied:
	case <-ctx.Done():
		t.Fatal("leader wrote no segment")
	}
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = a.Wait()

	bOut.waitFor(t, ctx, "leading room")
	for tapB.firstPut().IsZero() {
		select {
		case <-ctx.Done():
			t.Fatal("standby wrote no segment")
		case <-time.After(20 * time.Millisecond):
		}
	}
	takeover := tapB.firstPut().Sub(killed)

	time.Sleep(3 * time.Second)
	stopProducer()
	<-prodDone
	objects, err := objstore.NewS3Store(ctx, objstore.S3Config{
		Bucket: env.Bucket, Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey, Prefix: "failover/",
	})
	if err != nil {
		t.Fatal(err)
	}
	accepted, last := p.Accepted()
	first, lastSec := slicertest.VerifySegments(t, ctx, objects, "failover", accepted, last)
	t.Logf("takeover: %d ms (kill → standby's first segment PUT); %d gifts over seconds %d..%d, each exactly once",
		takeover.Milliseconds(), len(accepted), first, lastSec)
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func redisConfig(addr string) redisx.Config { return redisx.Config{URL: addr} }
