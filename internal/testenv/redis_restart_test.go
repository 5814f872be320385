package testenv

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

// TestRedisRestart checks that what the slicer relies on across a Redis
// restart survives it, stopped gently (SIGTERM) or killed (SIGKILL): plain
// keys, stream entries, a consumer group's last-delivered id and pending
// list; and that a key whose TTL ran out while Redis was down is gone, as a
// lapsed lease must be.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		stop func(*Server)
	}{
		{"SIGTERM", (*Server).Stop},
		{"SIGKILL", (*Server).Kill},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, srv := RedisRestartable(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rdb, err := redisx.Connect(ctx, redisx.Config{URL: addr})
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()

			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(rdb.Set(ctx, "k", "v", 0).Err())
			must(rdb.Set(ctx, "lapses", "x", 300*time.Millisecond).Err())
			id1, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"f", "1"}}).Result()
			must(err)
			must(rdb.XGroupCreate(ctx, "s", "g", "0").Err())
			read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 1}).Result()
			must(err)
			if len(read) != 1 || len(read[0].Messages) != 1 || read[0].Messages[0].ID != id1 {
				t.Fatalf("first read = %v", read)
			}
			// Acknowledged by Redis just before it goes down.
			id2, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"f", "2"}}).Result()
			must(err)

			tt.stop(srv)
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Fatal("a stopped server accepts connections")
			}
			time.Sleep(500 * time.Millisecond) // past the 300 ms TTL
			srv.Start()

			// The client reconnects by itself; a pooled connection that
			// died with the server may fail one command (the client never
			// retries), so wait for the first answer.
			for err := rdb.Ping(ctx).Err(); err != nil; err = rdb.Ping(ctx).Err() {
				if ctx.Err() != nil {
					t.Fatalf("client never reconnected: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
				t.Errorf("GET k after restart = %q, %v; want v", v, err)
			}
			if err := rdb.Get(ctx, "lapses").Err(); !errors.Is(err, redis.Nil) {
				t.Errorf("a key whose TTL passed while Redis was down: GET = %v, want nil", err)
			}
			p, err := rdb.XPending(ctx, "s", "g").Result()
			must(err)
			if p.Count != 1 || p.Lower != id1 {
				t.Errorf("pending after restart = %+v, want only %s", p, id1)
			}
			read, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 10}).Result()
			must(err)
			if len(read) != 1 || len(read[0].Messages) != 1 || read[0].Messages[0].ID != id2 {
				t.Errorf("read after restart = %v, want only the entry added before the stop, %s", read, id2)
			}
		})
	}
}
