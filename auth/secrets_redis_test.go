package auth_test

import (
	"bytes"
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testenv"
)

// secretsBackend is one SecretStore implementation under test; rdb is set
// for Redis, to check the key layout and TTL.
type secretsBackend struct {
	name string
	open func(t *testing.T) (auth.SecretStore, redis.UniversalClient)
}

func secretsBackends() []secretsBackend {
	return []secretsBackend{
		{"memory", func(t *testing.T) (auth.SecretStore, redis.UniversalClient) {
			return auth.NewMemorySecrets(), nil
		}},
		{"redis", func(t *testing.T) (auth.SecretStore, redis.UniversalClient) {
			rdb := redistest.Client(t)
			return auth.NewRedisSecrets(rdb), rdb
		}},
		{"redis-cluster", func(t *testing.T) (auth.SecretStore, redis.UniversalClient) {
			rdb := redistest.Cluster(t)
			return auth.NewRedisSecrets(rdb), rdb
		}},
	}
}

// TestSecretStoreConformance runs every SecretStore implementation through
// the same cases, each on an empty store.
func TestSecretStoreConformance(t *testing.T) {
	binary := make([]byte, 256) // secrets are bytes, not text
	for i := range binary {
		binary[i] = byte(i)
	}
	cases := []struct {
		name string
		run  func(t *testing.T, s auth.SecretStore, rdb redis.UniversalClient)
	}{
		{"publish and fetch", func(t *testing.T, s auth.SecretStore, rdb redis.UniversalClient) {
			mustPublish(t, s, 41, []byte("forty-one"))
			mustPublish(t, s, 42, binary)
			wantFetch(t, s, []int64{41, 42}, map[int64][]byte{41: []byte("forty-one"), 42: binary})
			if rdb != nil {
				ttl, err := rdb.PTTL(context.Background(), "danmaku:{auth}:epoch:42").Result()
				if err != nil || ttl <= 0 || ttl > time.Minute {
					t.Fatalf("PTTL of epoch 42 = %v, %v; want the published ttl", ttl, err)
				}
			}
		}},
		{"missing epochs skipped", func(t *testing.T, s auth.SecretStore, _ redis.UniversalClient) {
			mustPublish(t, s, 7, []byte("seven"))
			wantFetch(t, s, []int64{6, 7, 8}, map[int64][]byte{7: []byte("seven")})
			wantFetch(t, s, []int64{100, -1}, map[int64][]byte{})
			wantFetch(t, s, nil, map[int64][]byte{})
		}},
		{"republish replaces", func(t *testing.T, s auth.SecretStore, _ redis.UniversalClient) {
			mustPublish(t, s, 9, []byte("old"))
			mustPublish(t, s, 9, []byte("new"))
			wantFetch(t, s, []int64{9}, map[int64][]byte{9: []byte("new")})
		}},
		{"fetched and published bytes are copies", func(t *testing.T, s auth.SecretStore, _ redis.UniversalClient) {
			secret := []byte("secret")
			mustPublish(t, s, 3, secret)
			secret[0] = 'X'
			got := wantFetch(t, s, []int64{3}, map[int64][]byte{3: []byte("secret")})
			got[3][0] = 'Y'
			wantFetch(t, s, []int64{3}, map[int64][]byte{3: []byte("secret")})
		}},
	}
	for _, b := range secretsBackends() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s, rdb := b.open(t)
					c.run(t, s, rdb)
				})
			}
		})
	}
}

// TestRedisSecretsACL creates the gslb's and the edge's ACL users from
// redisx's table (the auth center runs in the gslb; the edge verifies) and
// checks that the center publishes, the verifier reads and nothing else, on
// one server and on a cluster. ACL users are per node (a cluster does not
// share them): on a cluster they are set on every node.
func TestRedisSecretsACL(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		addr := testenv.Redis(t)
		admin := redistest.Dial(t, redisx.Config{URL: addr})
		testSecretsACL(t, admin, addr)
	})
	t.Run("redis-cluster", func(t *testing.T) {
		url := testenv.SharedRedisCluster(t).URL()
		admin := redistest.Dial(t, redisx.Config{URL: url}).(*redis.ClusterClient)
		ctx := context.Background()
		t.Cleanup(func() {
			_ = admin.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
				return c.Do(ctx, "ACL", "DELUSER", redisx.ACLUser(redisx.ACLGSLB), redisx.ACLUser(redisx.ACLEdge)).Err()
			})
		})
		testSecretsACL(t, admin, url)
	})
}

func testSecretsACL(t *testing.T, admin redis.UniversalClient, url string) {
	ctx := context.Background()
	passwords := map[string]string{redisx.ACLGSLB: "center-pw", redisx.ACLEdge: "verifier-pw"}
	for role, pw := range passwords {
		args, err := redisx.SetUser(role, pw)
		if err != nil {
			t.Fatal(err)
		}
		a := make([]any, len(args))
		for i, s := range args {
			a[i] = s
		}
		setUser := func(ctx context.Context, c *redis.Client) error { return c.Do(ctx, a...).Err() }
		if cc, ok := admin.(*redis.ClusterClient); ok {
			err = cc.ForEachShard(ctx, setUser)
		} else {
			err = setUser(ctx, admin.(*redis.Client))
		}
		if err != nil {
			t.Fatalf("ACL SETUSER %s: %v", redisx.ACLUser(role), err)
		}
	}
	if err := admin.Set(ctx, "danmaku:load", "other data", 0).Err(); err != nil {
		t.Fatal(err)
	}
	center := auth.NewRedisSecrets(redistest.Dial(t, redisx.Config{URL: url, Username: redisx.ACLUser(redisx.ACLGSLB), Password: "center-pw"}))
	var vrdb redis.UniversalClient
	if strings.Contains(url, ",") {
		vrdb = redistest.Dial(t, redisx.Config{URL: url, Username: redisx.ACLUser(redisx.ACLEdge), Password: "verifier-pw"})
	} else {
		vrdb = redistest.Dial(t, redisx.Config{URL: "redis://" + redisx.ACLUser(redisx.ACLEdge) + ":verifier-pw@" + url})
	}
	verifier := auth.NewRedisSecrets(vrdb)

	mustPublish(t, center, 5, []byte("five"))
	wantFetch(t, verifier, []int64{4, 5, 6}, map[int64][]byte{5: []byte("five")})

	denied := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s: err = %v, want NOPERM", what, err)
		}
	}
	denied("verifier publishes", verifier.Publish(ctx, 5, []byte("forged"), time.Minute))
	denied("verifier reads another key", vrdb.Get(ctx, "danmaku:load").Err())
	denied("verifier lists keys", vrdb.Keys(ctx, "*").Err())
	denied("verifier deletes a secret", vrdb.Del(ctx, "danmaku:{auth}:epoch:5").Err())
	wantFetch(t, verifier, []int64{5}, map[int64][]byte{5: []byte("five")}) // unchanged

	_, err := redisx.Connect(ctx, redisx.Config{URL: url, Username: redisx.ACLUser(redisx.ACLEdge), Password: "wrong"})
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Errorf("connect with a wrong password: err = %v, want an error that does not echo the password", err)
	}
}

func mustPublish(t *testing.T, s auth.SecretStore, epoch int64, secret []byte) {
	t.Helper()
	if err := s.Publish(context.Background(), epoch, secret, time.Minute); err != nil {
		t.Fatalf("Publish(%d): %v", epoch, err)
	}
}

func wantFetch(t *testing.T, s auth.SecretStore, epochs []int64, want map[int64][]byte) map[int64][]byte {
	t.Helper()
	got, err := s.Fetch(context.Background(), epochs...)
	if err != nil {
		t.Fatalf("Fetch(%v): %v", epochs, err)
	}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("Fetch(%v) = %v, want %v", epochs, printable(got), printable(want))
	}
	return got
}

func printable(m map[int64][]byte) map[int64]string {
	out := make(map[int64]string, len(m))
	for k, v := range m {
		out[k] = strconv.Quote(string(v))
	}
	return out
}
