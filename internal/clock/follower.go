package clock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Follower is a clock that follows a remote one — the stream store's, whose
// time stamps every message id and so decides which segment a message
// belongs to — from samples taken every interval. Now costs no round trip:
// it is the local clock plus the offset of the best recent sample (the one
// with the shortest round trip, exact to within half of it). Until the
// first sample it is the local clock. Safe for concurrent use.
type Follower struct {
	local    Clock
	read     func(context.Context) (time.Time, error)
	interval time.Duration

	offset atomic.Int64 // remote minus local, ns
	rtt    atomic.Int64 // of the sample the offset came from, ns
	synced atomic.Bool
}

// Follower defaults.
const (
	// Clocks drift by microseconds per second; a sample every few seconds
	// keeps the offset far inside any publish delay and costs the remote
	// nothing.
	defaultFollowEvery = 5 * time.Second
	followSamples      = 3
)

// NewFollower returns a Follower of read's clock. local nil: the system
// clock; interval zero: 5 s.
func NewFollower(local Clock, read func(context.Context) (time.Time, error), interval time.Duration) *Follower {
	if interval == 0 {
		interval = defaultFollowEvery
	}
	return &Follower{local: Or(local), read: read, interval: interval}
}

// Now returns the remote clock's time as best known.
func (f *Follower) Now() time.Time { return f.local.Now().Add(time.Duration(f.offset.Load())) }

// Offset returns the remote clock minus the local clock, the round trip of
// the sample it came from (its uncertainty is half of that), and whether a
// sample was taken at all.
func (f *Follower) Offset() (offset, rtt time.Duration, ok bool) {
	return time.Duration(f.offset.Load()), time.Duration(f.rtt.Load()), f.synced.Load()
}

// Sync takes a few samples and keeps the one with the shortest round trip.
func (f *Follower) Sync(ctx context.Context) error {
	var (
		best    time.Duration = -1
		bestOff time.Duration
		errs    []error
	)
	for range followSamples {
		t0 := f.local.Now()
		remote, err := f.read(ctx)
		t1 := f.local.Now()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rtt := max(t1.Sub(t0), 0)
		if best < 0 || rtt < best {
			best, bestOff = rtt, remote.Sub(t0.Add(rtt/2))
		}
	}
	if best < 0 {
		return errors.Join(errs...)
	}
	f.offset.Store(int64(bestOff))
	f.rtt.Store(int64(best))
	f.synced.Store(true)
	return nil
}

// Run syncs every interval until ctx is done. A failed sync keeps the last
// offset: a clock that was right seconds ago is still right to within
// microseconds.
func (f *Follower) Run(ctx context.Context) error {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		_ = f.Sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
