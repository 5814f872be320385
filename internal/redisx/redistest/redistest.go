// Package redistest gives tests a client of a fresh, empty Redis: a single
// server started by testenv for the calling test, or the test binary's
// shared Redis Cluster, emptied for it. Both are skipped without the
// binaries unless servers are required.
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
// default user. Both are closed when t ends. Every call starts its own
// server, so parallel tests share nothing.
func Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	return Dial(t, redisx.Config{URL: testenv.Redis(t)})
}

// Cluster returns a cluster client (redisx.Connect with every node as a
// seed: a *redis.ClusterClient) of the test binary's shared Redis Cluster,
// emptied for t (testenv.SharedRedisCluster: the package needs
// `func TestMain(m *testing.M) { testenv.Main(m) }`, and tests using it
// must not run in parallel). The client is closed when t ends.
func Cluster(t testing.TB) redis.UniversalClient {
	t.Helper()
	return Dial(t, redisx.Config{URL: testenv.SharedRedisCluster(t).URL()})
}

// Kind is a Redis deployment a conformance suite runs against.
type Kind struct {
	// Name is "redis" (one server) or "redis-cluster", for subtest names.
	Name string
	// Client returns a client of an empty Redis of this kind for t:
	// Client or Cluster.
	Client func(t testing.TB) redis.UniversalClient
}

// Kinds lists both deployments — one server and a cluster — so that a
// suite written against redis.UniversalClient runs on each:
//
//	for _, k := range redistest.Kinds() {
//		t.Run(k.Name, func(t *testing.T) { run(t, k.Client(t)) })
//	}
func Kinds() []Kind {
	return []Kind{{"redis", Client}, {"redis-cluster", Cluster}}
}

// Dial connects with cfg (e.g. as another ACL user of a server from
// testenv.Redis) and closes the client when t ends; it fails t if Redis does
// not answer.
//
// Unless cfg sets one, the breaker has no slow-call rule (SlowCall -1): on
// a loaded CI machine a starved test process makes fast answers look slow,
// and a breaker opened by that fails a test about something else. Errors
// and timeouts still open it; a test of the slow-call rule sets its own.
func Dial(t testing.TB, cfg redisx.Config) redis.UniversalClient {
	t.Helper()
	if cfg.Breaker.SlowCall == 0 {
		cfg.Breaker.SlowCall = -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := redisx.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
