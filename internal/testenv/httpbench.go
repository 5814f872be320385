package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchHTTP serves h on a loopback listener and sends it b.N requests over
// keep-alive connections, inFlight at a time, each made by newReq from the
// server's base URL, the request's number (1..b.N) and the sending worker's
// (0..inFlight-1). Every answer must be 200; it reports "req/s". The
// throughput benchmarks that compare a handler with a bare one (ingest,
// gslb) run it for both sides in one run.
func BenchHTTP(b *testing.B, h http.Handler, inFlight int, newReq func(base string, i int64, worker int) *http.Request) {
	b.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: inFlight, MaxIdleConnsPerHost: inFlight, MaxConnsPerHost: inFlight}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var (
		next, failed atomic.Int64
		wg           sync.WaitGroup
	)
	b.ReportAllocs()
	b.ResetTimer()
	for w := range inFlight {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				resp, err := client.Do(newReq(srv.URL, i, w))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
