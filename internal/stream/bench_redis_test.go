package stream_test

import (
	"context"
	"strconv"
	"testing"

	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// benchBatch is the size of one Append or ReadGroup in the benchmarks: about
// what an ingest node batches for a busy room.
const benchBatch = 100

func benchMessages(n int) []wire.Message {
	msgs := make([]wire.Message, n)
	for i := range msgs {
		is := strconv.Itoa(i)
		msgs[i] = wire.Message{Kind: wire.KindBarrage, User: "u" + is, Nick: "观众" + is, Avatar: "a1", Text: "弹幕内容 " + is}
	}
	return msgs
}

// BenchmarkRedisAppend appends batches of benchBatch messages, one pipeline
// each, to a local Redis.
func BenchmarkRedisAppend(b *testing.B) {
	c := redisClient(b, true)
	s := newRedisStore(b, c, nil)
	ctx := context.Background()
	key := stream.Key{Room: "bench", Lane: stream.Barrage}
	msgs := benchMessages(benchBatch)
	if _, err := s.Append(ctx, key, msgs); err != nil { // registers the room
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Append(ctx, key, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRedisReadGroup reads and acknowledges batches of benchBatch
// entries through a consumer group, as the slicer does.
func BenchmarkRedisReadGroup(b *testing.B) {
	c := redisClient(b, true)
	s := newRedisStore(b, c, nil)
	ctx := context.Background()
	key := stream.Key{Room: "bench", Lane: stream.Barrage}
	msgs := benchMessages(benchBatch)
	read := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, err := s.Append(ctx, key, msgs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		es, err := s.ReadGroup(ctx, key, "slicer", "c1", benchBatch, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(es) != benchBatch {
			b.Fatalf("ReadGroup returned %d entries, want %d", len(es), benchBatch)
		}
		ids := make([]string, len(es))
		for i := range es {
			ids[i] = es[i].ID
		}
		if err := s.Ack(ctx, key, "slicer", ids...); err != nil {
			b.Fatal(err)
		}
		read += len(es)
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "msgs/s")
}
