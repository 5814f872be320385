package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/breaker"
	"danmaku/internal/breaker/breakertest"
	"danmaku/internal/objstore"
	"danmaku/internal/testenv"
)

// TestS3StoreOutage cuts the path to versitygw (a proxy that swallows
// every byte: requests hang, as with a paused server or lost packets)
// under a load of concurrent puts and gets for DANMAKU_OUTAGE (default
// 2 s): the store's breaker opens, calls then fail at once with ErrOpen,
// none takes longer than its deadline, and the breaker closes once the
// server is back.
func TestS3StoreOutage(t *testing.T) {
	outage := breakertest.Outage(t, 2*time.Second)
	env := testenv.S3(t)
	proxy := breakertest.NewProxy(t, strings.TrimPrefix(env.Endpoint, "http://"))
	env.Endpoint = "http://" + proxy.Addr()
	const call = time.Second
	s := newS3Store(t, env, testPrefix(), func(c *objstore.S3Config) {
		c.Timeout = call
		c.Breaker = breaker.Config{OpenFor: 300 * time.Millisecond}
	})
	b, _ := breaker.For(breaker.Config{Dep: "s3", Target: env.Endpoint + "/" + env.Bucket})

	var (
		tl   breakertest.Timeline
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	ctx := context.Background()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d/%d", w, i)
				start := time.Now()
				_, err := s.Put(ctx, key, []byte("segment"), objstore.PutOptions{IfNoneMatch: true})
				tl.Record(start, err)
				if i%4 == 0 {
					start = time.Now()
					_, err = s.Get(ctx, key)
					if errors.Is(err, objstore.ErrNotFound) {
						err = nil // an answer: the put failed in the outage
					}
					tl.Record(start, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	tl.Cut()
	proxy.Cut()
	opened := false
	for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		opened = opened || b.State() == breaker.Open
	}
	proxy.Restore()
	tl.Restored()
	for deadline := time.Now().Add(15 * time.Second); b.State() != breaker.Closed || tl.Figures().ClosedAfter == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker stays %v after S3 came back: %v", b.State(), tl.Figures())
		}
	}
	close(stop)
	wg.Wait()

	f := tl.Figures()
	t.Logf("s3 outage %v, 8 writers: %v", outage, f)
	if !opened || f.Refused == 0 {
		t.Fatalf("the breaker never opened during the outage: %v", f)
	}
	if limit := call + time.Second; f.Longest > limit {
		t.Fatalf("a call took %v during the outage, past its deadline (%v + slack)", f.Longest, call)
	}
}

// TestS3StoreBreakerCounts: answers (not found, a failed condition, access
// denied) keep the breaker closed; 5xx answers open it, after which the
// store sends nothing until it half-opens.
func TestS3StoreBreakerCounts(t *testing.T) {
	var status atomic.Int32
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		code := int(status.Load())
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(code)
		fmt.Fprintf(w, "<Error><Code>%s</Code><Message>m</Message></Error>", map[int]string{404: "NoSuchKey", 412: "PreconditionFailed", 403: "AccessDenied", 500: "InternalError"}[code])
	}))
	t.Cleanup(srv.Close)
	s := fakeS3Store(t, srv.URL, func(c *objstore.S3Config) { c.Breaker = breaker.Config{Failures: 3, OpenFor: time.Hour} })
	ctx := context.Background()
	for _, code := range []int32{404, 412, 403} {
		status.Store(code)
		for range 5 {
			_, _ = s.Get(ctx, "k")
			_, _ = s.Put(ctx, "k", []byte("x"), objstore.PutOptions{IfNoneMatch: true})
		}
	}
	status.Store(500)
	for range 3 {
		if _, err := s.Get(ctx, "k"); err == nil || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("Get on a 500: %v, want the server's error", err)
		}
	}
	before := requests.Load()
	_, err := s.Get(ctx, "k")
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Get after three 500s: %v, want ErrOpen", err)
	}
	if _, err := s.Put(ctx, "k", []byte("x"), objstore.PutOptions{}); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Put after three 500s: %v, want ErrOpen", err)
	}
	if n := requests.Load() - before; n != 0 {
		t.Fatalf("%d requests reached the server through an open breaker", n)
	}
}
