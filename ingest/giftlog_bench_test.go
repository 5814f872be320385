package ingest_test

import (
	"context"
	"strconv"
	"testing"

	"danmaku/ingest"
	"danmaku/internal/redisx/redistest"
)

// BenchmarkRedisGiftLog measures one AppendGift (a new order each time) on
// one server and on a cluster, the latter also with WaitReplicas 1: the
// price of confirming a gift only once a replica has it, one replication
// round trip (on loopback here; in production the replica's network
// distance).
func BenchmarkRedisGiftLog(b *testing.B) {
	for _, bc := range []struct {
		name string
		kind redistest.Kind
		wait int
	}{
		{"redis", redistest.Kinds()[0], 0},
		{"redis-cluster", redistest.Kinds()[1], 0},
		{"redis-cluster-wait1", redistest.Kinds()[1], 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rdb := bc.kind.Client(b)
			l, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: newRedisStore(b, rdb), Logger: quiet, WaitReplicas: bc.wait})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
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
