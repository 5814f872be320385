package slicer

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ Lease = (*RedisLease)(nil)

// RedisLease is the Lease shared by every slicer: one string key per room,
// danmaku:{room:ID}:leader, holding the holder's name with a TTL (PX). Both
// operations are single Lua scripts, so a check and the write that depends
// on it cannot interleave with another slicer's.
//
// Leases are timed by Redis's clock, not the slicers': a holder must renew
// well within ttl (the slicer renews every quarter of it) and stop writing as
// soon as a renewal fails or errs. A lease is not a fence by itself: writes
// made after it lapsed are refused by the object store's conditional puts.
type RedisLease struct {
	rdb redis.UniversalClient
}

// NewRedisLease returns the lease table kept in rdb.
func NewRedisLease(rdb redis.UniversalClient) *RedisLease { return &RedisLease{rdb: rdb} }

// leaseKey is the key of room's lease.
func leaseKey(room string) string { return redisx.RoomKey(room, "leader") }

// acquireScript takes a free lease (SET PX) or renews the caller's own
// (PEXPIRE). It never touches a lease held by someone else, so a standby
// polling for the lease cannot extend the leader's.
//
// KEYS[1] lease key; ARGV[1] holder; ARGV[2] ttl in ms. Returns 1 if the
// caller holds the lease afterwards, else 0.
var acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return 1
end
if cur == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)

// releaseScript deletes the lease only if the caller holds it
// (compare-and-delete), so a deposed leader's late Release cannot free its
// successor's lease.
//
// KEYS[1] lease key; ARGV[1] holder. Returns the number of keys deleted.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
`)

// Acquire implements Lease.
func (l *RedisLease) Acquire(ctx context.Context, room, holder string, ttl time.Duration) (bool, error) {
	px, err := redisx.PX(ttl)
	if err != nil {
		return false, fmt.Errorf("slicer: acquire lease %s: %w", room, err)
	}
	n, err := acquireScript.Run(ctx, l.rdb, []string{leaseKey(room)}, holder, px).Int()
	if err != nil {
		return false, fmt.Errorf("slicer: acquire lease %s: %w", room, err)
	}
	return n == 1, nil
}

// Release implements Lease.
func (l *RedisLease) Release(ctx context.Context, room, holder string) error {
	if err := releaseScript.Run(ctx, l.rdb, []string{leaseKey(room)}, holder).Err(); err != nil {
		return fmt.Errorf("slicer: release lease %s: %w", room, err)
	}
	return nil
}
