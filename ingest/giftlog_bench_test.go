package ingest_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"danmaku/ingest"
	"danmaku/internal/redisx/redistest"
	"danmaku/slicer"
)

// BenchmarkRedisGiftLog measures one AppendGift (a new order each time) on
// one server and on a cluster, the latter also with WaitReplicas 1: the
// price of confirming a gift only once a replica has it, one replication
// round trip (on loopback here; in production the replica's network
// distance). "backlog" runs with a backlog published for the room (under
// the bound, so every gift is accepted and adds its share to it): the
// script's path in a backed-up room.
func BenchmarkRedisGiftLog(b *testing.B) {
	for _, bc := range []struct {
		name    string
		kind    redistest.Kind
		wait    int
		backlog bool
	}{
		{"redis", redistest.Kinds()[0], 0, false},
		{"redis-backlog", redistest.Kinds()[0], 0, true},
		{"redis-cluster", redistest.Kinds()[1], 0, false},
		{"redis-cluster-wait1", redistest.Kinds()[1], 1, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rdb := bc.kind.Client(b)
			l, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: newRedisStore(b, rdb), Logger: quiet, WaitReplicas: bc.wait})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if bc.backlog {
				// Far under the bound (30 s) whatever b.N: 1e-9 s a gift.
				if err := slicer.NewRedisBacklog(rdb).Set(ctx, "bench", 1, 1e-9, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			m := testGift(100)
			if _, _, err := l.AppendGift(ctx, "bench", "warm-up", m); err != nil { // connects, loads the script
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, _, err := l.AppendGift(ctx, "bench", strconv.Itoa(i), m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
