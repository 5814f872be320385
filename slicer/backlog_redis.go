package slicer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/redisx"
)

var _ Backlog = (*RedisBacklog)(nil)

// RedisBacklog is the Backlog shared by slicers and ingest nodes: one
// string key per room, danmaku:{room:ID}:giftbacklog, holding "SECONDS
// PERGIFT" (two decimal numbers) with a TTL (PX). It sits in the room's
// Cluster slot, so the ingest's gift script (ingest.RedisGiftLog) reads it
// in the same atomic step as its order check and append, and adds PERGIFT
// to SECONDS for each gift it accepts (keeping the TTL); that script names
// the same key and parses the same format.
type RedisBacklog struct{ rdb redis.UniversalClient }

// NewRedisBacklog returns a Backlog on rdb.
func NewRedisBacklog(rdb redis.UniversalClient) *RedisBacklog { return &RedisBacklog{rdb: rdb} }

// backlogKey is room's gift backlog key.
func backlogKey(room string) string { return redisx.RoomKey(room, "giftbacklog") }

// Set implements Backlog.
func (b *RedisBacklog) Set(ctx context.Context, room string, seconds, perGift float64, ttl time.Duration) error {
	if err := checkBacklog(seconds, perGift); err != nil {
		return err
	}
	px, err := redisx.PX(ttl)
	if err != nil {
		return fmt.Errorf("slicer: set gift backlog of %s: %w", room, err)
	}
	v := strconv.FormatFloat(seconds, 'f', 6, 64) + " " + strconv.FormatFloat(perGift, 'g', -1, 64)
	if err := b.rdb.Set(ctx, backlogKey(room), v, time.Duration(px)*time.Millisecond).Err(); err != nil {
		return fmt.Errorf("slicer: set gift backlog of %s: %w", room, err)
	}
	return nil
}

// Get implements Backlog.
func (b *RedisBacklog) Get(ctx context.Context, room string) (float64, error) {
	v, err := b.rdb.Get(ctx, backlogKey(room)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("slicer: get gift backlog of %s: %w", room, err)
	}
	sec, _, _ := strings.Cut(v, " ")
	f, err := strconv.ParseFloat(sec, 64)
	if err != nil {
		return 0, fmt.Errorf("slicer: gift backlog of %s is not a number: %q", room, v)
	}
	return f, nil
}
