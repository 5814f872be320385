package redisx

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/testenv"
)

// TestConnectCluster: the seed list forms that make a Cluster client, and a
// client that finds a killed master's slots on its promoted replica as soon
// as the cluster has promoted it — not at go-redis's periodic refresh of the
// slot map, a minute later, which is what it did before reloadOnFailure.
func TestConnectCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and fails a master over")
	}
	cl := testenv.RedisClusterWith(t, testenv.ClusterConfig{NodeTimeout: time.Second})
	ctx := context.Background()
	for _, cfg := range []Config{
		{URL: cl.URL()}, // every node, comma-separated
		{URL: strings.Join(cl.Addrs()[:2], " , ")},       // any two, with spaces
		{URL: cl.Addrs()[3], Cluster: true},              // one seed, cluster asked for
		{URL: "redis://" + cl.Addrs()[1], Cluster: true}, // a URL, cluster asked for
	} {
		c, err := Connect(ctx, cfg)
		if err != nil {
			t.Fatalf("Connect(%+v): %v", cfg, err)
		}
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Errorf("Connect(%+v) = %T, want a cluster client", cfg, c)
		}
		// Keys of every master's slots work through any seed.
		for _, room := range []string{"a", "b", "c", "d", "e", "f"} {
			if err := c.Set(ctx, RoomKey(room, "k"), "v", 0).Err(); err != nil {
				t.Fatalf("SET through %+v: %v", cfg, err)
			}
		}
		c.Close()
	}

	c, err := Connect(ctx, Config{URL: cl.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := RoomKey("failover", "k")
	if err := c.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	master := cl.MasterOf(t, key)
	master.Kill()
	// Commands to the dead master fail until its replica is promoted...
	failed := 0
	for c.Set(ctx, key, "during", 0).Err() != nil && failed < 1000 {
		failed++
		time.Sleep(20 * time.Millisecond)
	}
	cl.WaitHealthy(t)
	// ...and once the cluster has promoted it, the client follows within a
	// few attempts (20 s is a generous bound on that, far below the
	// minute of a periodic refresh).
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = c.Set(ctx, key, "after", 0).Err(); last == nil {
			t.Logf("%d commands failed while the master was down", failed)
			return
		}
	}
	t.Fatalf("the client still fails on the promoted replica's slots: %v", last)
}
