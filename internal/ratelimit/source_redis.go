package ratelimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ RuleSource = (*RedisSource)(nil)

// RulesKey is the Redis key of the deployment's rules document: one string
// every gslb and ingest node polls (a GET of a few KiB every Poll).
const RulesKey = redisx.Prefix + "ratelimit:rules"

// RedisSource is the rules document in Redis, shared by every node: a
// change reaches each within one Poll.
type RedisSource struct {
	rdb redis.UniversalClient
	key string
}

// NewRedisSource returns the rules document at RulesKey in rdb.
func NewRedisSource(rdb redis.UniversalClient) *RedisSource {
	return &RedisSource{rdb: rdb, key: RulesKey}
}

// Load implements RuleSource.
func (s *RedisSource) Load(ctx context.Context) ([]byte, error) {
	b, err := s.rdb.Get(ctx, s.key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNoRules
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: rules from redis: %w", err)
	}
	return b, nil
}

// Put checks doc and, if it parses, stores it for every node. A document
// written by other means (redis-cli SET) is checked by each node instead,
// which keeps its rules when it does not parse.
func (s *RedisSource) Put(ctx context.Context, doc []byte) error {
	if _, err := Parse(doc); err != nil {
		return err
	}
	if err := s.rdb.Set(ctx, s.key, doc, 0).Err(); err != nil {
		return fmt.Errorf("ratelimit: store rules: %w", err)
	}
	return nil
}
