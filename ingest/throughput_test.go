package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
)

// Shape of BenchmarkIngestHTTP: realistic senders (one token each, signed
// by the real keyring) and enough requests in flight that a room's
// write-behind queue fills whole batches, as a hot room's does.
const (
	throughputUsers    = 20_000
	throughputInFlight = 4096
	throughputRoom     = "bench-room"
)

// BenchmarkIngestHTTP measures barrage requests answered per second over
// loopback HTTP, for a bare gin handler that only decodes the same body
// ("bare") and for the full layered path with memory and Redis backends —
// all in one run, so their ratio is what docs/benchmarks.md reports. The
// room and user limits are set out of reach and every text differs: every
// comment takes the whole path to the stream (anti-spam and audit
// included), the costliest case.
func BenchmarkIngestHTTP(b *testing.B) {
	for _, kind := range []string{"bare", "memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			h, tokens := throughputServer(b, kind)
			// Distinct texts: a repeated one would stop at duplicate
			// suppression, not reach the stream.
			testenv.BenchHTTP(b, h, throughputInFlight, testenv.HTTPLoad{
				Method: http.MethodPost, Path: barragePath(throughputRoom),
				Body: `{"text":"好听！encore  encore {i}"}`, ContentType: "application/json",
				Auth: tokens, Stride: 7919,
			})
		})
	}
}

// throughputServer returns the handler of kind and a token per sender.
func throughputServer(b *testing.B, kind string) (http.Handler, []string) {
	b.Helper()
	mod := func(c *Config) {
		c.Addr = selfAddr
		c.UserCapacity, c.UserRefill = 1e9, 1e9
		c.RoomBase, c.RoomCeiling, c.RoomRefill = 1e9, 1e9, 1e9
	}
	switch kind {
	case "bare":
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.POST("/v1/rooms/:room/barrage", func(c *gin.Context) {
			var req struct {
				Text string `json:"text"`
			}
			if err := json.NewDecoder(c.Request.Body).Decode(&req); err != nil {
				c.JSON(http.StatusBadRequest, gin.H{"ok": false})
				return
			}
			c.JSON(http.StatusOK, gin.H{"ok": true})
		})
		return e, throughputTokens(b, newFixture(b, nil))
	case "redis":
		rdb := redistest.Client(b)
		rs, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		gate, err := NewRedisRoomGate(RedisRoomGateConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		gifts, err := NewRedisGiftLog(RedisGiftLogConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		inner := mod
		mod = func(c *Config) { inner(c); c.Streams, c.Gate, c.Gifts = rs, gate, gifts }
	}
	f := newFixtureOn(b, clock.Real{}, stream.NewMemoryStore(nil), mod)
	b.Cleanup(func() {
		// What the benchmark stored, for the reader of -v output.
		es, err := f.srv.cfg.Streams.Read(context.Background(), stream.Key{Room: throughputRoom, Lane: stream.Barrage}, "0", 1, 0)
		if err == nil && len(es) == 0 && b.N > 0 {
			b.Errorf("%s: nothing stored", kind)
		}
	})
	return f.engine, throughputTokens(b, f)
}

func throughputTokens(b *testing.B, f *fixture) []string {
	tokens := make([]string, throughputUsers)
	for i := range tokens {
		tokens[i] = f.token(b, throughputRoom, fmt.Sprintf("user-%d", i), auth.RoleViewer)
	}
	return tokens
}
