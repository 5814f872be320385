// Package reload runs the periodic refresh of a snapshot that several
// components keep (the event directory, the ban list, the word list, the
// lotteries): reload every interval, keep the last good snapshot when a
// reload fails, and say so once per outage rather than once per tick.
package reload

import (
	"context"
	"log/slog"
	"time"
)

// Every calls refresh at once and then every interval until ctx is done.
// A failing refresh is logged at the first failure of a run of failures
// (what names the snapshot, e.g. "ban list") and the recovery once; the
// caller's snapshot stays as it was. It returns nil when ctx is done.
func Every(ctx context.Context, every time.Duration, log *slog.Logger, what string, refresh func(context.Context) error) error {
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		if err := refresh(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				log.Warn(what+" reload failed; keeping the last snapshot", "err", err)
			}
			failing = true
		} else {
			if failing {
				log.Info(what + " reloads again")
			}
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			// Both may be ready (a tick waiting while ctx ended): select
			// picks at random, and an ended ctx must not refresh again.
			if ctx.Err() != nil {
				return nil
			}
		}
	}
}
