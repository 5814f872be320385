// Package redistest gives tests a client of a fresh, empty Redis server,
// started by testenv (skipped without the binary unless servers are
// required). Every call starts its own server, so parallel tests share
// nothing.
package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
	"danmaku/internal/testenv"
)

// Client starts a Redis server for t and returns a client of it as the
// default user. Both are closed when t ends.
func Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	return Dial(t, redisx.Config{URL: testenv.Redis(t)})
}

// Dial connects with cfg (e.g. as another ACL user of a server from
// testenv.Redis) and closes the client when t ends; it fails t if Redis does
// not answer.
func Dial(t testing.TB, cfg redisx.Config) redis.UniversalClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := redisx.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
