package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"danmaku/sdk/wire"
)

// Entry is what the entry endpoint hands a client: where to send, where to
// listen, the dynamic token and the server's timing.
type Entry = wire.Entry

func cloneEntry(e Entry) Entry {
	e.Ingest = append([]string(nil), e.Ingest...)
	e.Edge = append([]string(nil), e.Edge...)
	return e
}

// APIError is a coded error answer of a server:
// {"error": {"code": "...", "message": "..."}}.
type APIError struct {
	// Status is the HTTP status.
	Status int
	// Code is the server's stable error code; "http_<status>" when the body
	// held none.
	Code string
	// Message is for people.
	Message string
	// RetryAfter is the Retry-After the server asked for, if any.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("sdk: server answered %d %s: %s", e.Status, e.Code, e.Message)
}

// temporary reports whether the same request may succeed later.
func (e *APIError) temporary() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 16 << 10

func readAPIError(resp *http.Response) *APIError {
	e := &APIError{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode)}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
	} else {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		} else if t, err := http.ParseTime(s); err == nil {
			e.RetryAfter = time.Until(t)
		}
	}
	return e
}

// session is one answer of the entry endpoint plus the clock sample it
// gave. Sessions are immutable; a re-join swaps in a new one. The client's
// clock follows the best sample of any (offerClock), not the last.
type session struct {
	entry Entry
	clock clockEstimate
}

const (
	maxEntryBody = 64 << 10
	// joinBackoffMin and joinBackoffMax bound the wait between failed joins.
	joinBackoffMin = 500 * time.Millisecond
	joinBackoffMax = 30 * time.Second
	// minTokenRefresh keeps a bogus token lifetime from turning the
	// refresher into a busy loop.
	minTokenRefresh = 5 * time.Second
)

// fetchEntry asks the entry endpoint once.
func (c *Client) fetchEntry(ctx context.Context) (*session, error) {
	u := strings.TrimRight(c.cfg.EntryURL, "/") + "/v1/entry?room=" + url.QueryEscape(c.cfg.Room) + "&proto=" + strconv.Itoa(wire.Protocol)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("sdk: entry: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Ticket)
	req.Header.Set("Accept", "application/json")
	c.stats.entryFetches.Add(1)
	t0 := c.clk.Now()
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sdk: entry: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sdk: entry: %w", readAPIError(resp))
	}
	var e Entry
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxEntryBody)).Decode(&e); err != nil {
		return nil, fmt.Errorf("sdk: entry: decode: %w", err)
	}
	t1 := c.clk.Now()
	if err := c.checkEntry(&e); err != nil {
		return nil, err
	}
	return &session{entry: e, clock: sample(e.ServerTimeMs, t0, t1)}, nil
}

// ErrBadEntry is returned for an entry answer the client cannot use.
var ErrBadEntry = errors.New("sdk: unusable entry")

// ErrUnsupported marks an entry this version of the client cannot follow (a
// segment duration it has no key scheme for): retrying cannot help, so Run
// returns it, wrapped in ErrJoin; the app needs a newer SDK.
var ErrUnsupported = errors.New("sdk: unsupported by this client version")

func (c *Client) checkEntry(e *Entry) error {
	switch {
	case e.Room != c.cfg.Room:
		return fmt.Errorf("%w: room %q, asked for %q", ErrBadEntry, e.Room, c.cfg.Room)
	case e.Token == "":
		return fmt.Errorf("%w: no token", ErrBadEntry)
	case e.CDN == "":
		return fmt.Errorf("%w: no CDN", ErrBadEntry)
	case e.ServerTimeMs <= 0:
		return fmt.Errorf("%w: no server time", ErrBadEntry)
	case e.PublishDelayMs < 0:
		return fmt.Errorf("%w: negative publish delay", ErrBadEntry)
	}
	if e.SegmentMs == 0 {
		e.SegmentMs = wire.SegmentDuration // an entry from before durations were per room
	}
	if !wire.ValidSegmentMs(e.SegmentMs) {
		// A duration this client has no key scheme for: it could poll
		// nothing, so it refuses clearly instead of waiting forever.
		return fmt.Errorf("%w: %w: segment_ms %d (this client knows 1000, 500 and 250)", ErrBadEntry, ErrUnsupported, e.SegmentMs)
	}
	if !strings.HasSuffix(e.CDN, "/") {
		e.CDN += "/"
	}
	return nil
}

// join fetches the entry until it succeeds, a permanent error occurs or ctx
// is done, after a random wait of up to jitter.
func (c *Client) join(ctx context.Context, jitter time.Duration) error {
	if jitter > 0 {
		if err := c.sleep(ctx, rand.N(jitter)); err != nil {
			return err
		}
	}
	backoff := joinBackoffMin
	for {
		s, err := c.fetchEntry(ctx)
		if err == nil {
			c.offerClock(s.clock)
			c.sess.Store(s)
			select {
			case c.tokenNews <- struct{}{}:
			default:
			}
			c.joinOnce.Do(func() { close(c.joined) })
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *APIError
		if (errors.As(err, &ae) && !ae.temporary()) || errors.Is(err, ErrUnsupported) {
			return fmt.Errorf("%w: %w", ErrJoin, err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if ae != nil && ae.RetryAfter > wait {
			wait = ae.RetryAfter
		}
		backoff = min(2*backoff, joinBackoffMax)
		c.log.Warn("sdk: join failed; retrying", "room", c.cfg.Room, "err", err, "wait", wait)
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// rejoin re-fetches the entry unless another goroutine already replaced
// stale. A permanent failure stops the client.
func (c *Client) rejoin(ctx context.Context, stale *session, jitter time.Duration) error {
	c.joinMu.Lock()
	defer c.joinMu.Unlock()
	if c.sess.Load() != stale {
		return nil
	}
	err := c.join(ctx, jitter)
	if err != nil && ctx.Err() == nil {
		c.fail(err)
	}
	return err
}

// refreshLoop re-fetches the entry before the ingest and the edge start
// refusing its token, when refreshAfter says.
func (c *Client) refreshLoop(ctx context.Context) {
	for ctx.Err() == nil {
		s := c.sess.Load()
		at := time.UnixMilli(s.entry.ServerTimeMs).Add(refreshAfter(&s.entry))
		if err := c.waitServer(ctx, at); err != nil {
			return
		}
		_ = c.rejoin(ctx, s, 0)
	}
}

// refreshAfter is how long after the entry's server time the client fetches
// the next one: the gslb's refresh_ms hint when it gives one (near a rate
// limit it stretches and spreads a crowd's refreshes), else 80 % of the
// token's lifetime. A hint that would outlive the token is ignored, so that
// a bad one cannot let the token lapse; minTokenRefresh bounds both.
func refreshAfter(e *Entry) time.Duration {
	lifeMs := e.TokenExpiresMs - e.ServerTimeMs
	d := time.Duration(lifeMs) * time.Millisecond * 8 / 10
	// Compared in milliseconds: a huge hint must not wrap around in the
	// conversion to a Duration.
	if e.RefreshMs > 0 && e.RefreshMs < lifeMs {
		d = time.Duration(e.RefreshMs) * time.Millisecond
	}
	return max(d, minTokenRefresh)
}
