package auth

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

// secretPrefix starts every epoch secret's key. The hash tag {auth} keeps all
// epochs in one Cluster slot, so that Fetch is one MGET on Redis Cluster too.
const secretPrefix = redisx.Prefix + "{auth}:epoch:"

func secretKey(epoch int64) string { return secretPrefix + strconv.FormatInt(epoch, 10) }

var _ SecretStore = (*RedisSecrets)(nil)

// RedisSecrets is the SecretStore in Redis: one string per epoch,
// danmaku:{auth}:epoch:N, holding the secret's bytes, set with a TTL (PX) by
// the auth center and read with MGET by every verifier.
//
// The auth center (the gslb) alone may write them: whoever can publish a
// key can mint tokens every node accepts. Each role connects as its own
// Redis ACL user (redisx.ACL, docs/operations.md "Redis users"): the
// gslb's may write danmaku:{auth}:*, the ingest's and the edge's may only
// read it (%R~), the slicer's cannot touch it.
type RedisSecrets struct {
	rdb redis.UniversalClient
}

// NewRedisSecrets returns the secret store kept in rdb, which should be
// connected as the ACL user of the caller's role.
func NewRedisSecrets(rdb redis.UniversalClient) *RedisSecrets { return &RedisSecrets{rdb: rdb} }

// Publish implements SecretStore.
func (s *RedisSecrets) Publish(ctx context.Context, epoch int64, secret []byte, ttl time.Duration) error {
	px, err := redisx.PX(ttl)
	if err != nil {
		return fmt.Errorf("auth: publish epoch %d: %w", epoch, err)
	}
	if err := s.rdb.Set(ctx, secretKey(epoch), secret, time.Duration(px)*time.Millisecond).Err(); err != nil {
		return fmt.Errorf("auth: publish epoch %d: %w", epoch, err)
	}
	return nil
}

// Fetch implements SecretStore.
func (s *RedisSecrets) Fetch(ctx context.Context, epochs ...int64) (map[int64][]byte, error) {
	out := make(map[int64][]byte, len(epochs))
	if len(epochs) == 0 {
		return out, nil
	}
	keys := make([]string, len(epochs))
	for i, e := range epochs {
		keys[i] = secretKey(e)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: fetch epochs %v: %w", epochs, err)
	}
	if len(vals) != len(keys) {
		return nil, fmt.Errorf("auth: fetch epochs %v: MGET answered %d values for %d keys", epochs, len(vals), len(keys))
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[epochs[i]] = []byte(str)
		}
	}
	return out, nil
}
