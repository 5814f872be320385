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
	"danmaku/internal/testwait"
)

// TestS3StoreOutage cuts the path to versitygw (a proxy that swallows
// every byte: requests hang, as with a paused server or lost packets)
// under a load of concurrent puts and gets for DANMAKU_OUTAGE (default
// 2 s, and on until the breaker has opened): the store's breaker opens,
// calls then fail at once with ErrOpen, the hung ones are ended by their
// deadline (shown by their errors: the longest call is a figure, since a
// starved test process adds its own delay to it), and the breaker closes
// once the server is back.
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

		cut      atomic.Bool  // set during the outage
		deadline atomic.Int64 // calls of the outage ended by their deadline
		mu       sync.Mutex
		other    []error // failures of the outage ended by neither a deadline nor the breaker
	)
	record := func(start time.Time, during bool, err error) {
		tl.Record(start, err)
		if !during || !cut.Load() || err == nil {
			return // begun or ended outside the outage
		}
		switch {
		case errors.Is(err, breaker.ErrOpen):
		case breakertest.EndedByDeadline(err):
			deadline.Add(1)
		default:
			mu.Lock()
			other = append(other, err)
			mu.Unlock()
		}
	}
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
				start, during := time.Now(), cut.Load()
				_, err := s.Put(ctx, key, []byte("segment"), objstore.PutOptions{IfNoneMatch: true})
				record(start, during, err)
				if i%4 == 0 {
					start, during = time.Now(), cut.Load()
					_, err = s.Get(ctx, key)
					if errors.Is(err, objstore.ErrNotFound) {
						err = nil // an answer: the put failed in the outage
					}
					record(start, during, err)
				}
				time.Sleep(10 * time.Millisecond) // pacing the load, not synchronisation
			}
		}()
	}
	// S3 answers before the cut.
	testwait.For(t, "a call answered before the cut", func() bool { return tl.Figures().OK > 0 })
	tl.Cut()
	proxy.Cut()
	cut.Store(true)
	// The outage lasts at least its time, and on until the breaker has
	// refused calls and a hung call has been ended by its deadline: on a
	// busy machine the failures that open it can come late.
	end := time.Now().Add(outage)
	testwait.For(t, "the breaker to open and a hung call to end by its deadline", func() bool {
		return !time.Now().Before(end) && b.State() == breaker.Open && tl.Figures().Refused > 0 && deadline.Load() > 0
	})
	cut.Store(false)
	proxy.Restore()
	tl.Restored()
	testwait.For(t, "the breaker to close after S3 came back", func() bool {
		return b.State() == breaker.Closed && tl.Figures().ClosedAfter != 0
	})
	close(stop)
	wg.Wait()

	f := tl.Figures()
	t.Logf("s3 outage %v, 8 writers: %v", outage, f)
	t.Logf("longest call %v (deadline %v; a figure, not asserted: scheduling on a busy machine adds to it); %d ended by their deadline", f.Longest, call, deadline.Load())
	if len(other) > 0 {
		t.Fatalf("%d calls of the outage failed by neither their deadline nor the breaker, e.g. %v", len(other), other[0])
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
