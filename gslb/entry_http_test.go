package gslb_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/testenv"
)

// BenchmarkEntryHTTP measures entry requests answered per second over
// loopback HTTP with keep-alive — ticket verified, addresses chosen, token
// signed, JSON written — and, in the same run, a bare gin handler that
// returns a fixed body of the same size: their ratio is what
// docs/benchmarks.md reports. 2,000 users with their own tickets, 64
// requests in flight.
func BenchmarkEntryHTTP(b *testing.B) {
	const users, inFlight = 2000, 64
	f := newEntryFixtureWith(b, true, gslb.AllocatorConfig{}, gslb.ServerConfig{MaxInFlight: 1 << 20}, healthyNodes()...)
	tickets := make([]string, users)
	for i := range tickets {
		tickets[i] = mintTicket(b, ticketKey, "user-"+strconv.Itoa(i), auth.Ticket{Nick: "Ann"}, time.Hour)
	}
	sample := f.get("/v1/entry?room=r1", tickets[0])
	if sample.Code != http.StatusOK {
		b.Fatalf("entry: %d %s", sample.Code, sample.Body)
	}
	fixed := sample.Body.Bytes()
	bare := gin.New()
	bare.GET("/v1/entry", func(c *gin.Context) { c.Data(http.StatusOK, "application/json; charset=utf-8", fixed) })

	for _, kind := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"entry", f.engine}} {
		b.Run(kind.name, func(b *testing.B) {
			testenv.BenchHTTP(b, kind.h, inFlight, testenv.HTTPLoad{
				Method: http.MethodGet, Path: "/v1/entry?room=r1", Auth: tickets, Stride: 1,
			})
		})
	}
}
