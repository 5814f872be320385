package redisx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/breaker"
)

// breakerDep is the dep label of Redis breakers.
const breakerDep = "redis"

// defaultOpenFor is how long a Redis breaker stays open before a probe:
// shorter than the breaker's own default, because a probe costs one
// command (at most one IOTimeout) and the ingest's held comments wait on
// the room gate until the breaker closes.
const defaultOpenFor = time.Second

// failureReplies are the Redis error replies that say the server cannot
// serve now (loading its data, a script hogging it, its cluster or master
// down, a write sent to a replica in a failover, out of memory) rather than
// answering the command: they count as failures for the breaker. Every other
// reply (NOSCRIPT, NOGROUP, WRONGTYPE, a script's error) is an answer.
var failureReplies = []string{"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "TRYAGAIN", "OOM"}

// isFailure reports whether a command's error says that Redis is
// unreachable, too slow or cannot serve.
func isFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, redis.ErrClosed), errors.Is(err, breaker.ErrOpen):
		// No answer needed (Nil), the client was closed by its owner, or
		// nothing was sent.
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// The whole first word: BUSYGROUP (a consumer group that exists)
		// is an answer, BUSY is not.
		code, _, _ := strings.Cut(strings.TrimPrefix(rerr.Error(), "ERR "), " ")
		for _, p := range failureReplies {
			if code == p {
				return true
			}
		}
		return false
	}
	// A refused or broken connection, a timeout (ours, the caller's
	// deadline or the pool's), a protocol error.
	return true
}

// breakerHook guards one Redis server (a standalone server, or one node of
// a Cluster) with the process's breaker of its address, and puts a deadline
// on every call that has none sooner.
type breakerHook struct {
	b    *breaker.Breaker
	call time.Duration
}

// checkBreaker checks cfg.Breaker's settings before any node's breaker is
// made from them (a Cluster's are made as it finds its nodes).
func checkBreaker(cfg Config) error {
	bc := cfg.Breaker
	bc.Dep, bc.Target = breakerDep, "any"
	bc.SlowCall = max(bc.SlowCall, 0) // negative: off (Config.Breaker)
	if _, err := breaker.New(bc); err != nil {
		return fmt.Errorf("redisx: %w", err)
	}
	return nil
}

func newBreakerHook(addr string, cfg Config, call, io time.Duration) (breakerHook, error) {
	bc := cfg.Breaker
	bc.Dep, bc.Target, bc.IsFailure = breakerDep, addr, isFailure
	switch {
	case bc.SlowCall == 0:
		bc.SlowCall = io / 2
	case bc.SlowCall < 0:
		bc.SlowCall = 0 // off: breaker.Config's zero
	}
	if bc.OpenFor == 0 {
		bc.OpenFor = defaultOpenFor
	}
	b, err := breaker.For(bc)
	if err != nil {
		return breakerHook{}, err
	}
	return breakerHook{b: b, call: call}, nil
}

func (h breakerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h breakerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if inCall(ctx) {
			return next(ctx, cmd)
		}
		done, err := h.b.Allow()
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		block := blockOf(cmd)
		ctx, cancel := h.deadline(ctx, block)
		start := time.Now()
		err = next(ctx, cmd)
		took := time.Since(start) - block
		cancel()
		done(outcome(err, cmd.Err()), took)
		return err
	}
}

func (h breakerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if inCall(ctx) {
			return next(ctx, cmds)
		}
		done, err := h.b.Allow()
		if err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		var block time.Duration
		for _, c := range cmds {
			block = max(block, blockOf(c))
		}
		ctx, cancel := h.deadline(ctx, block)
		start := time.Now()
		err = next(ctx, cmds)
		took := time.Since(start) - block
		cancel()
		errs := make([]error, 0, len(cmds)+1)
		errs = append(errs, err)
		for _, c := range cmds {
			errs = append(errs, c.Err())
		}
		done(outcome(errs...), took)
		return err
	}
}

// deadline bounds one call: its blocking time plus the hook's call
// timeout, unless ctx ends sooner. The pool wait, a dial and the command's
// reads and writes each have their own timeout already; this bounds them
// together, so that no call waits out all of them in a row.
//
// The context returned also marks the call as under way: go-redis sends a
// new connection's handshake (HELLO, CLIENT SETINFO) through the client's
// hooks with the context of the call that dialled, and that handshake is
// part of the call — counted once, with it — not a call of its own, which
// would count one outage twice and, in a half-open breaker, be refused by
// its own probe.
func (h breakerHook) deadline(ctx context.Context, block time.Duration) (context.Context, context.CancelFunc) {
	ctx = context.WithValue(ctx, callKey{}, true)
	limit := h.call + block
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= limit {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, limit)
}

// callKey marks a context as that of a call the breaker already admitted.
type callKey struct{}

func inCall(ctx context.Context) bool {
	v, _ := ctx.Value(callKey{}).(bool)
	return v
}

// outcome is what the breaker counts for a call: the first failure among
// its errors, else the first error (an answer), else nil.
func outcome(errs ...error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, context.Canceled) || isFailure(err) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// blockOf is how long cmd may block on the server by its own arguments
// (XREAD and XREADGROUP BLOCK ms, WAIT's timeout, a blocking pop's): time
// that is neither slow nor a reason to give up. 0 for other commands, and
// for "block forever", which this project never sends.
func blockOf(cmd redis.Cmder) time.Duration {
	args := cmd.Args()
	switch strings.ToLower(cmd.Name()) {
	case "xread", "xreadgroup":
		for i := 1; i+1 < len(args); i++ {
			if s, ok := args[i].(string); ok && strings.EqualFold(s, "block") {
				if ms, ok := number(args[i+1]); ok {
					return time.Duration(ms * float64(time.Millisecond))
				}
			}
		}
	case "wait", "waitaof":
		if ms, ok := number(args[len(args)-1]); ok {
			return time.Duration(ms * float64(time.Millisecond))
		}
	case "blpop", "brpop", "bzpopmin", "bzpopmax", "brpoplpush", "blmove":
		if s, ok := number(args[len(args)-1]); ok {
			return time.Duration(s * float64(time.Second))
		}
	}
	return 0
}

// number reads a numeric command argument as go-redis holds it.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case string:
		f, err := strconv.ParseFloat(n, 64)
		return f, err == nil
	}
	return 0, false
}
