package testenv

import (
	"strings"
	"testing"
	"time"
)

// TestRedisCluster pins what the cluster tests rely on: six nodes on
// distinct ports, three masters with a replica each, every slot covered,
// writes routed by slot (MOVED from the wrong node), and both kinds of
// failover — CLUSTER FAILOVER on a replica, and a killed master whose
// replica is promoted after cluster-node-timeout.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := RedisClusterWith(t, ClusterConfig{NodeTimeout: time.Second})

	seen := map[string]bool{}
	for _, a := range c.Addrs() {
		if seen[a] {
			t.Fatalf("address %s twice in %v", a, c.Addrs())
		}
		seen[a] = true
	}
	if len(seen) != 6 || c.URL() != strings.Join(c.Addrs(), ",") {
		t.Fatalf("Addrs = %v, URL = %q", c.Addrs(), c.URL())
	}
	roles := map[string]int{}
	for _, n := range c.Nodes() {
		r, err := n.Role()
		if err != nil {
			t.Fatal(err)
		}
		roles[r]++
	}
	if roles["master"] != 3 || roles["slave"] != 3 {
		t.Fatalf("roles = %v, want 3 masters and 3 replicas", roles)
	}

	const key = "danmaku:{room:r1}:live"
	master := c.MasterOf(t, key)
	if _, err := master.Do("SET", key, "v"); err != nil {
		t.Fatalf("SET on the slot's master: %v", err)
	}
	for _, n := range c.Nodes() {
		if n == master {
			continue
		}
		_, err := n.Do("SET", key, "v")
		if err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
			t.Fatalf("SET on %s, not the slot's master: err = %v, want MOVED", n.Addr, err)
		}
	}

	// Graceful: the replica takes over and the old master follows it.
	replica := c.ReplicaOf(t, master)
	replica.Failover(t)
	c.WaitHealthy(t)
	if got := c.MasterOf(t, key); got != replica {
		t.Fatalf("after CLUSTER FAILOVER the slot is served by %s, want the replica %s", got.Addr, replica.Addr)
	}
	if v, err := replica.Do("GET", key); err != nil || v != "v" {
		t.Fatalf("GET on the new master = %v, %v", v, err)
	}

	// Crash: the master dies and its replica is voted in.
	master = replica
	replica = c.ReplicaOf(t, master)
	master.Kill()
	c.WaitHealthy(t)
	if got := c.MasterOf(t, key); got != replica {
		t.Fatalf("after the kill the slot is served by %s, want the replica %s", got.Addr, replica.Addr)
	}
	if v, err := replica.Do("GET", key); err != nil || v != "v" {
		t.Fatalf("GET on the promoted replica = %v, %v", v, err)
	}

	// The killed node comes back as a replica of its successor.
	master.Start(t)
	c.WaitHealthy(t)
	if r, err := master.Role(); err != nil || r != "slave" {
		t.Fatalf("restarted node's role = %q, %v; want slave", r, err)
	}
	c.FlushAll(t)
	if v, err := replica.Do("DBSIZE"); err != nil || v != int64(0) {
		t.Fatalf("DBSIZE after FlushAll = %v, %v", v, err)
	}
}
