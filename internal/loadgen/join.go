package loadgen

import (
	"context"
	"sync/atomic"
	"time"
)

// joinPacer hands out this shard's join slots at Config.JoinRate: the i-th
// join (a poller's or a user's entry) may start at start + i/rate, as an
// audience arriving at the plan's join_per_s does. Without a rate every
// join starts at once (EntryConcurrency users at a time, every poller).
type joinPacer struct {
	rate  float64 // joins a second, this shard's share; 0: unpaced
	start time.Time
	next  atomic.Int64
}

// wait blocks until the caller's join slot, or ctx's end.
func (p *joinPacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return nil
	}
	i := p.next.Add(1) - 1
	d := time.Until(p.start.Add(time.Duration(float64(i) / p.rate * float64(time.Second))))
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// span is how long the paced joins of n users and pollers take at the
// rate: the join timeout is counted after it.
func (p *joinPacer) span(n int) time.Duration {
	if p.rate <= 0 {
		return 0
	}
	return time.Duration(float64(n) / p.rate * float64(time.Second))
}

// joinTimeout bounds the joins: Config.JoinTimeout after the paced span.
func (g *Generator) joinTimeout() time.Duration {
	return g.cfg.JoinTimeout + g.joins.span(g.cfg.share(g.cfg.Users)+g.cfg.share(g.cfg.Pollers))
}
