package sdk

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of the client's lifecycle.
var (
	// ErrRunning is returned by a second call of Run.
	ErrRunning = errors.New("sdk: Run already called")
	// ErrClosed is returned by Send and Announce after Run has returned.
	ErrClosed = errors.New("sdk: client closed")
	// ErrJoin wraps the entry endpoint's refusal (a bad or expired ticket, a
	// room that does not exist); Run returns it.
	ErrJoin = errors.New("sdk: join refused")
	// ErrRoomEnded is returned by Run when the room's event has ended: the
	// client has delivered the room's last segment (its manifest says so)
	// or the edge said so, and there is nothing more to wait for.
	ErrRoomEnded = errors.New("sdk: the room has ended")
)

// Client is one viewer in one room. Create it with New, run it with Run.
type Client struct {
	cfg Config
	log *slog.Logger
	clk Clock
	// tick bounds a single sleep; zero with the system clock.
	tick time.Duration

	msgs  chan Message
	merge *merger
	// held carries the merger's output to holdLoop when the app gave a
	// playhead clock (nil otherwise: the merger writes msgs itself).
	held   chan Message
	hold   holdQueue
	holdMu sync.Mutex // guards hold between holdLoop and Playhead()
	send   *sendQueue
	stats  counters
	// wantList asks takedownLoop for the room's takedown list; tdListN is
	// the n of the newest list read.
	wantList chan struct{}
	tdListN  atomic.Uint64
	reporter reporter

	sess atomic.Pointer[session]
	// tokenNews is signalled after every new session, so that the edge
	// connection's writer sends the fresh token in-band.
	tokenNews chan struct{}
	est       atomic.Pointer[clockEstimate] // the best server-clock estimate
	joinMu    sync.Mutex                    // serialises re-joins
	joined    chan struct{}
	joinOnce  sync.Once

	running atomic.Bool
	done    chan struct{} // closed when Run returns
	failMu  sync.Mutex
	failErr error
	cancel  context.CancelFunc
}

// New checks cfg, applies its defaults and returns a client. It starts
// nothing; call Run.
func New(cfg Config) (*Client, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	c := &Client{
		cfg:       cfg,
		log:       cfg.Logger,
		clk:       cfg.Clock,
		msgs:      make(chan Message, cfg.MessageBuffer),
		joined:    make(chan struct{}),
		tokenNews: make(chan struct{}, 1),
		wantList:  make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	if _, ok := cfg.Clock.(systemClock); !ok {
		c.tick = fakeTick
	}
	out := c.msgs
	if cfg.Playhead != nil {
		c.held = make(chan Message, cfg.MessageBuffer)
		out = c.held
	}
	c.merge = newMerger(out, newSeenSet(cfg.SeenIDs, cfg.SeenWindow),
		newSeenSet(cfg.TakedownIDs, takedownForever), &c.stats)
	c.send = newSendQueue(cfg.SendQueue, cfg.SendInterval, cfg.SendDedupWindow)
	return c, nil
}

// Messages returns the channel the merged stream is delivered on. It is the
// same channel on every call and is closed when Run returns.
func (c *Client) Messages() <-chan Message { return c.msgs }

// Entry returns the current entry: a copy, safe to keep. Before the first
// join it is the zero Entry.
func (c *Client) Entry() Entry {
	if s := c.sess.Load(); s != nil {
		return cloneEntry(s.entry)
	}
	return Entry{}
}

// Run joins the room and runs the client until ctx is done or the entry
// endpoint refuses the ticket (at the first join or at any later one, such as
// the token refresh): the app must then get a new ticket and a new Client.
// Temporary failures (network, 5xx, 429) are retried, honouring Retry-After.
// Run returns nil when ctx ends it, an error wrapping ErrJoin (and the
// server's *APIError) when the ticket is refused, and ErrRunning when called
// a second time.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	c.failMu.Lock()
	c.cancel = cancel
	c.failMu.Unlock()
	defer func() {
		cancel()
		close(c.msgs)
		close(c.done)
	}()

	if err := c.join(ctx, c.cfg.FirstJoinJitter); err != nil {
		if ctx.Err() != nil {
			return c.failure()
		}
		return err
	}
	// The poller starts at the segment the client joined in, so it sees
	// what is sent from now on — the earliest segment it can have joined
	// in: serverNow is known only within the clock margin, and a start
	// estimated late by a few ms past a segment boundary skipped the
	// segment before it, which held messages sent after the join (the
	// end-to-end test under load: a comment stamped 4 ms before the
	// boundary, sent after every viewer had joined, missed by 6 of 200).
	start := c.serverNow().Add(-c.clockMargin()).UnixMilli()
	live := start
	start = c.playheadStart(start)
	c.log.Debug("sdk: joined", "room", c.cfg.Room, "ms", start, "segment_ms", c.sess.Load().entry.SegmentMs)

	var wg sync.WaitGroup
	// The room's takedown list is read before the first segment is
	// delivered: a late joiner's first segments may hold a message taken
	// down before it joined.
	listed := make(chan struct{})
	wg.Go(func() { c.takedownLoop(ctx, listed) })
	wg.Go(func() {
		select {
		case <-listed:
		case <-ctx.Done():
			return
		}
		c.pollLoop(ctx, start, live)
	})
	if c.held != nil {
		wg.Go(func() { c.holdLoop(ctx, c.held) })
	}
	wg.Go(func() { c.sendLoop(ctx) })
	wg.Go(func() { c.refreshLoop(ctx) })
	wg.Go(func() { c.refineLoop(ctx) })
	if !c.cfg.NoEdge {
		wg.Go(func() { c.edgeLoop(ctx) })
	}
	wg.Wait()
	return c.failure()
}

// fail stops Run with err.
func (c *Client) fail(err error) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failErr == nil {
		c.failErr = err
		c.log.Error("sdk: stopping", "room", c.cfg.Room, "err", err)
	}
	if c.cancel != nil {
		c.cancel()
	}
}

// end stops Run with err, a normal end (not a failure).
func (c *Client) end(err error) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failErr == nil {
		c.failErr = err
		c.log.Info("sdk: stopping", "room", c.cfg.Room, "why", err)
	}
	if c.cancel != nil {
		c.cancel()
	}
}

func (c *Client) failure() error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	return c.failErr
}

// waitJoined waits for the first join.
func (c *Client) waitJoined(ctx context.Context) (*session, error) {
	select {
	case <-c.joined:
		return c.sess.Load(), nil
	case <-c.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// sleep waits d on the client's clock.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	return c.waitLocal(ctx, c.clk.Now().Add(d))
}

// waitLocal waits until the local clock reaches t.
func (c *Client) waitLocal(ctx context.Context, t time.Time) error {
	return c.waitFor(ctx, func() time.Duration { return t.Sub(c.clk.Now()) })
}

// waitServer waits until the server time reaches t. The offset is re-read
// on every wake-up, so a re-join that moves it is taken into account.
func (c *Client) waitServer(ctx context.Context, t time.Time) error {
	return c.waitFor(ctx, func() time.Duration { return t.Sub(c.serverNow()) })
}

func (c *Client) waitFor(ctx context.Context, left func() time.Duration) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := left()
		if d <= 0 {
			return nil
		}
		if c.tick > 0 {
			d = min(d, c.tick)
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}
