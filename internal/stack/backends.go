package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"danmaku/auth"
	"danmaku/ingest"
	"danmaku/internal/event"
	"danmaku/internal/loadtable"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx"
	"danmaku/internal/rules"
	"danmaku/internal/stream"
	"danmaku/slicer"
)

// BackendConfig says which real backends to use. Zero fields keep the
// in-memory defaults of embedded mode.
type BackendConfig struct {
	// Redis, when its URL is set, backs the room streams, load table, token
	// secrets, slicer leases, room buckets and the gift log.
	Redis redisx.Config
	// S3, when its Bucket is set, backs the object store.
	S3 objstore.S3Config
	// AuditS3, when its Bucket is set, keeps the audit trail (a bucket the
	// CDN does not serve: the trail names users).
	AuditS3 objstore.S3Config
	// RulesS3, when its Bucket is set, keeps the rules (word lists,
	// rate-limit rules, moderation settings) as versioned objects
	// (rules.ObjectStore) instead of Redis: a bucket the CDN does not serve.
	RulesS3 objstore.S3Config
	// RulesDir, when set and RulesS3 is not, keeps the rules in this
	// directory (rules.ObjectStore on objstore.DirStore): one machine, or
	// a shared file system.
	RulesDir string
	// GiftWaitReplicas, when positive, makes the gift log answer a gift
	// only once that many replicas of its Redis master hold it (WAIT): an
	// answered gift then survives the master's loss (docs/architecture.md,
	// "Redis Cluster"). Zero: the master's own acknowledgement.
	GiftWaitReplicas int
}

// defaultRedisPool bounds the connections of a process to each Redis node:
// enough for the edge's blocking read per room of a large event plus the
// rest.
const defaultRedisPool = 2048

// OpenBackends connects the backends cfg names. The returned close function
// releases them; call it after the stack has stopped.
func OpenBackends(ctx context.Context, cfg BackendConfig, log *slog.Logger) (Backends, func() error, error) {
	var b Backends
	closers := []func() error{}
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	if cfg.Redis.URL != "" {
		// An edge waits on every room it serves in a blocking read of the
		// live lane, which holds a connection for up to a second: the pool
		// must cover the rooms.
		rc := cfg.Redis
		if rc.PoolSize == 0 {
			rc.PoolSize = defaultRedisPool
		}
		rdb, err := redisx.Connect(ctx, rc)
		if err != nil {
			return Backends{}, nil, err
		}
		closers = append(closers, rdb.Close)
		streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: log})
		if err != nil {
			_ = closeAll()
			return Backends{}, nil, err
		}
		b.Shared.Streams = streams
		b.Shared.Load = loadtable.NewRedisTable(rdb)
		b.Shared.Secrets = auth.NewRedisSecrets(rdb)
		// Leases get a client of their own: a renewal must never queue for
		// a connection behind the edge's blocking reads.
		leaseRDB, err := redisx.Connect(ctx, cfg.Redis)
		if err != nil {
			_ = closeAll()
			return Backends{}, nil, err
		}
		closers = append(closers, leaseRDB.Close)
		b.Slicer.Lease = slicer.NewRedisLease(leaseRDB)
		b.Slicer.Settings = slicer.NewRedisSettings(rdb)
		b.Slicer.Backlog = slicer.NewRedisBacklog(rdb)
		if b.Ingest.Gate, err = ingest.NewRedisRoomGate(ingest.RedisRoomGateConfig{Client: rdb, Streams: streams, Logger: log}); err != nil {
			_ = closeAll()
			return Backends{}, nil, err
		}
		b.Shared.Events = event.NewRedisStore(rdb)
		if b.Ingest.FastLane, err = ingest.NewRedisFastLane(ingest.RedisFastLaneConfig{Client: rdb, Streams: streams, Logger: log}); err != nil {
			_ = closeAll()
			return Backends{}, nil, err
		}
		b.Ingest.Lotteries = ingest.NewRedisLotteryStore(rdb, nil)
		b.Ingest.Reports = ingest.NewRedisReportStore(rdb, ingest.ReportBounds{})
		b.Ingest.Takedowns = ingest.NewRedisTakedownStore(rdb)
		b.Shared.Bans = ingest.NewRedisBanStore(rdb)
		b.Shared.Rules = rules.NewRedisStore(rdb)
		b.Ingest.Global = ingest.NewRedisGlobalLimiter(rdb)
		if b.Ingest.Gifts, err = ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: streams, WaitReplicas: cfg.GiftWaitReplicas, Logger: log}); err != nil {
			_ = closeAll()
			return Backends{}, nil, err
		}
	}
	if cfg.S3.Bucket != "" {
		s3, err := objstore.NewS3Store(ctx, cfg.S3)
		if err != nil {
			_ = closeAll()
			return Backends{}, nil, fmt.Errorf("stack: s3: %w", err)
		}
		b.Shared.Objects = s3
	}
	if cfg.AuditS3.Bucket != "" {
		s3, err := objstore.NewS3Store(ctx, cfg.AuditS3)
		if err != nil {
			_ = closeAll()
			return Backends{}, nil, fmt.Errorf("stack: audit s3: %w", err)
		}
		b.Shared.Audit = s3
	}
	switch {
	case cfg.RulesS3.Bucket != "":
		s3, err := objstore.NewS3Store(ctx, cfg.RulesS3)
		if err != nil {
			_ = closeAll()
			return Backends{}, nil, fmt.Errorf("stack: rules s3: %w", err)
		}
		b.Shared.Rules = rules.NewObjectStore(s3, "")
	case cfg.RulesDir != "":
		d, err := objstore.NewDirStore(cfg.RulesDir)
		if err != nil {
			_ = closeAll()
			return Backends{}, nil, fmt.Errorf("stack: rules dir: %w", err)
		}
		b.Shared.Rules = rules.NewObjectStore(d, "")
	}
	return b, closeAll, nil
}
