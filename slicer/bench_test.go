package slicer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// benchSeconds runs the slicer's per-second work — read the consumer group,
// queue, allocate, sample, encode, PUT, ack, trim — over seconds of perSecond
// messages each (90 % barrage, 10 % gifts), and reports messages/s from
// stream to segment and the process's CPU µs per message over that work
// ("cpu-µs/msg", Redis's in its own process left out). The appends happen
// outside the timer and the CPU reading.
func benchSeconds(b *testing.B, streams stream.Store, clk *clock.Fake, perSecond int) {
	ctx := context.Background()
	objects := objstore.NewMemoryStore()
	var c clock.Clock // a nil *Fake must stay a nil interface
	if clk != nil {
		c = clk
	}
	s, err := New(Config{Streams: streams, Objects: objects, Clock: c, Budget: 60})
	if err != nil {
		b.Fatal(err)
	}
	room := fmt.Sprintf("bench%d", perSecond)
	st, err := s.resume(ctx, room, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]wire.Message, 0, perSecond)
	for i := range perSecond {
		if i%10 == 0 {
			batch = append(batch, wire.Message{Kind: wire.KindGift, User: fmt.Sprintf("u%d", i%97), Nick: "夜空中最亮的星", Gift: "rose", Value: 10, Avatar: "a17"})
		} else {
			batch = append(batch, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Nick: "夜空中最亮的星", Text: "这首歌太好听了，全场大合唱！", Avatar: "a17"})
		}
	}
	b.ResetTimer()
	// cpu is this process's CPU time over the timed parts alone (the
	// slicer's read, encode, PUT and ack; not the appends, and not Redis,
	// its own process): "cpu-µs/msg".
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		// Append one second's messages; with a store on its own clock
		// (Redis) the slicer follows that clock.
		for lo := 0; lo < len(batch); lo += 500 {
			hi := min(lo+500, len(batch))
			var barrage, live []wire.Message
			for _, m := range batch[lo:hi] {
				if m.Kind == wire.KindBarrage {
					barrage = append(barrage, m)
				} else {
					live = append(live, m)
				}
			}
			if _, err := streams.Append(ctx, stream.Key{Room: room, Lane: stream.Barrage}, barrage); err != nil {
				b.Fatal(err)
			}
			if _, err := streams.Append(ctx, stream.Key{Room: room, Lane: stream.Live}, live); err != nil {
				b.Fatal(err)
			}
		}
		if clk != nil {
			clk.Advance(time.Second)
		} else {
			time.Sleep(time.Until(time.UnixMilli((st.next+1)*1000 + 300)))
		}
		b.StartTimer()
		cpu0 := cpuTime()
		now, _ := streams.Now(ctx)
		if _, _, err := s.read(ctx, st); err != nil {
			b.Fatal(err)
		}
		st.readUpTo = now
		for s.complete(st) {
			if err := s.writeSlot(ctx, st, now, now); err != nil {
				b.Fatal(err)
			}
		}
		cpu += cpuTime() - cpu0
	}
	b.StopTimer()
	b.ReportMetric(float64(perSecond*b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(perSecond*b.N), "cpu-µs/msg")
}

// BenchmarkStreamToSegment measures the slicer alone (in-memory stream), on
// one core: the figure to compare with a room's peak upload rate.
func BenchmarkStreamToSegment(b *testing.B) {
	for _, n := range []int{1200, 12000} {
		b.Run(fmt.Sprintf("memory/perSecond=%d", n), func(b *testing.B) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 500_000_000))
			benchSeconds(b, stream.NewMemoryStore(clk), clk, n)
		})
	}
	b.Run("redis/perSecond=12000", func(b *testing.B) {
		rdb := redistest.Client(b)
		streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
		if err != nil {
			b.Fatal(err)
		}
		benchSeconds(b, streams, nil, 12000)
	})
}
