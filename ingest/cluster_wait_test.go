package ingest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"danmaku/ingest"
	"danmaku/internal/redisx"
	"danmaku/internal/testenv"
)

// TestClusterWaitGiftAnsweredStoredByItsRetry: under WaitReplicas 1 on a
// real Redis Cluster with one replica a master, a gift the API stored is
// never answered as failed without its retry (the same order id) answering
// it stored, and a gift it could not confirm is not stored at all:
//
//   - the room's replica stalled (SIGSTOP): the gift is stored but its WAIT
//     falls short (ErrNotReplicated); once the replica runs again the retry
//     answers the first id, duplicate;
//   - the room's master SIGKILLed and its replica promoted, with no replica
//     of its own: a new order is refused unstored (ErrReplicasOffline), not
//     stored-and-refused as before, while the retry of an order answered
//     before still finds it;
//   - the old master restarted (it rejoins as the new master's replica):
//     the refused order's retry stores it, once.
//
// Every gift the log stored is in the room's Live lane exactly once.
func TestClusterWaitGiftAnsweredStoredByItsRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a Redis Cluster master")
	}
	ctx := context.Background()
	cl := testenv.RedisClusterWith(t, testenv.ClusterConfig{Replicas: 1})
	rdb, err := redisx.Connect(ctx, redisx.Config{URL: cl.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	store := newRedisStore(t, rdb)
	gifts, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: store, Logger: quiet, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const room = "waitfail"
	master := cl.MasterOf(t, redisx.RoomKey(room, "live"))
	replica := cl.ReplicaOf(t, master)
	stored := map[string]string{} // order → entry id

	// retry sends order until it is answered, every failure on the way
	// being one of ok's, and returns the answer.
	retry := func(order string, ok ...error) (string, bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			id, dup, err := gifts.AppendGift(actx, room, order, testGift(1))
			cancel()
			if err == nil {
				return id, dup
			}
			known := false
			for _, e := range ok {
				known = known || errors.Is(err, e)
			}
			if !known {
				t.Fatalf("order %s: %v", order, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s still failing after 60 s: %v", order, err)
			}
			time.Sleep(100 * time.Millisecond) // the business server's backoff
		}
	}

	// (On a loaded machine even a running replica may miss the WAIT: the
	// retry settles it.)
	stored["a"], _ = retry("a", ingest.ErrNotReplicated)

	// A stalled replica: stored, not confirmed; the retry confirms it.
	replica.Pause()
	_, _, err = gifts.AppendGift(ctx, room, "b", testGift(1))
	replica.Resume()
	if !errors.Is(err, ingest.ErrNotReplicated) {
		t.Fatalf("gift with its replica stalled: err = %v, want ErrNotReplicated", err)
	}
	id, dup := retry("b", ingest.ErrNotReplicated)
	if !dup {
		t.Fatalf("retry of the gift stored while its replica stalled: duplicate false, want its first id answered")
	}
	stored["b"] = id
	cl.WaitHealthy(t)

	// The master killed: its replica takes over with no replica of its own.
	master.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if r, err := replica.Role(); err == nil && r == "master" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not promoted 30 s after its master's kill", replica.Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		// Until the client has the new map, a try may reach the dead
		// master (refused) or a node that says CLUSTERDOWN: not stored.
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, _, err := gifts.AppendGift(actx, room, "c", testGift(1))
		cancel()
		if errors.Is(err, ingest.ErrReplicasOffline) {
			break
		}
		if err == nil || errors.Is(err, ingest.ErrNotReplicated) {
			t.Fatalf("new order on a master with no replica: err = %v, want ErrReplicasOffline (nothing stored)", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("new order 30 s after the failover: %v, want ErrReplicasOffline", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(liveEntries(t, store, room)); n != 2 {
		t.Fatalf("after the refusal the room holds %d gifts, want the 2 answered before the kill", n)
	}

	// The old master back, as its successor's replica: the refused order's
	// retry stores it once; the earlier orders answer their ids.
	master.Start(t)
	stored["c"], _ = retry("c", ingest.ErrReplicasOffline, ingest.ErrNotReplicated)
	for order, want := range stored {
		if id, dup := retry(order, ingest.ErrNotReplicated); id != want || !dup {
			t.Errorf("retry of order %s = %s, duplicate %v; want %s, duplicate", order, id, dup, want)
		}
	}
	es := liveEntries(t, store, room)
	seen := map[string]int{}
	for _, e := range es {
		seen[e.ID]++
	}
	if len(es) != len(stored) {
		t.Errorf("room holds %d gifts, want %d (one per order)", len(es), len(stored))
	}
	for order, id := range stored {
		if seen[id] != 1 {
			t.Errorf("order %s's gift %s is in the room %d times, want once", order, id, seen[id])
		}
	}
}
