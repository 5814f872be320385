package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Errors of Send and Announce.
var (
	// ErrEmptyText is returned for a text that is empty once whitespace is
	// collapsed.
	ErrEmptyText = errors.New("sdk: empty text")
	// ErrTextTooLong is returned for a text longer than Config.MaxTextRunes.
	ErrTextTooLong = errors.New("sdk: text too long")
	// ErrNoIngest is returned when the entry named no ingest address.
	ErrNoIngest = errors.New("sdk: no ingest address")
)

// maxRecentTexts bounds the de-duplication memory of the send queue; a
// person does not type more distinct comments than this in 10 s.
const maxRecentTexts = 64

// sendQueue is the client-side layer of flow control: a bounded queue that
// drops its oldest entry, a minimum interval between posts and a memory of
// recent texts. It is safe for concurrent use.
type sendQueue struct {
	mu       sync.Mutex
	cap      int
	interval time.Duration
	dedup    time.Duration
	q        []string
	recent   []recentText // oldest first
	nextAt   time.Time    // earliest time of the next post
	wake     chan struct{}
}

type recentText struct {
	text string
	at   time.Time
}

func newSendQueue(capacity int, interval, dedup time.Duration) *sendQueue {
	return &sendQueue{cap: capacity, interval: interval, dedup: dedup, wake: make(chan struct{}, 1)}
}

// pushResult says what push did with a text.
type pushResult struct {
	deduped  bool // the same text was accepted within the window: not queued
	dropped  bool // the queue was full: its oldest entry was dropped
	heldBack bool // queued behind others or the interval: not posted at once
}

// push queues text at local time now.
func (s *sendQueue) push(text string, now time.Time) pushResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r pushResult
	if s.dedup > 0 {
		i := 0
		for i < len(s.recent) && now.Sub(s.recent[i].at) >= s.dedup {
			i++
		}
		s.recent = append(s.recent[:0], s.recent[i:]...)
		for _, rt := range s.recent {
			if rt.text == text {
				r.deduped = true
				return r
			}
		}
		if len(s.recent) == maxRecentTexts {
			s.recent = append(s.recent[:0], s.recent[1:]...)
		}
		s.recent = append(s.recent, recentText{text, now})
	}
	r.heldBack = len(s.q) > 0 || now.Before(s.nextAt)
	if len(s.q) == s.cap {
		// The dropped text was never sent: forget it, so that typing it
		// again is sent rather than answered as a duplicate.
		dropped := s.q[0]
		s.q = append(s.q[:0], s.q[1:]...)
		r.dropped = true
		for i, rt := range s.recent {
			if rt.text == dropped {
				s.recent = append(s.recent[:i], s.recent[i+1:]...)
				break
			}
		}
	}
	s.q = append(s.q, text)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return r
}

// next pops the text to post at local time now. With an empty queue ok is
// false; before the interval has passed it returns the time to wait until.
func (s *sendQueue) next(now time.Time) (text string, until time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.q) == 0 {
		return "", time.Time{}, false
	}
	if now.Before(s.nextAt) {
		return "", s.nextAt, true
	}
	text = s.q[0]
	s.q = append(s.q[:0], s.q[1:]...)
	s.nextAt = now.Add(s.interval)
	return text, time.Time{}, true
}

// normalize collapses runs of whitespace into one space and trims the ends,
// as the ingest does, so that limits and de-duplication see what the ingest
// will see.
func normalize(s string) string {
	return strings.Join(strings.Fields(strings.ToValidUTF8(s, "")), " ")
}

func (c *Client) checkText(text string) (string, error) {
	t := normalize(text)
	if t == "" {
		return "", ErrEmptyText
	}
	if n := utf8.RuneCountInString(t); n > c.cfg.MaxTextRunes {
		return "", fmt.Errorf("%w: %d characters, at most %d", ErrTextTooLong, n, c.cfg.MaxTextRunes)
	}
	return t, nil
}

// Send queues a comment. It returns nil once the comment is queued, and also
// when the same text was accepted within Config.SendDedupWindow (it is then
// not sent again). It returns ErrEmptyText or ErrTextTooLong for a text the
// ingest would refuse, and ErrClosed after Run has returned. The comment is
// posted by Run, at most one per Config.SendInterval; whether the ingest
// stored it is not reported (it answers stored and dropped comments alike).
func (c *Client) Send(ctx context.Context, text string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	t, err := c.checkText(text)
	if err != nil {
		return err
	}
	r := c.send.push(t, c.clk.Now())
	switch {
	case r.deduped:
		c.stats.sendsDeduped.Add(1)
		return nil
	case r.dropped:
		c.stats.sendsDropped.Add(1)
	}
	if r.heldBack {
		c.stats.sendsHeldBack.Add(1)
	}
	return nil
}

// sendLoop posts queued comments, one per interval.
func (c *Client) sendLoop(ctx context.Context) {
	for {
		text, until, ok := c.send.next(c.clk.Now())
		switch {
		case !ok:
			select {
			case <-ctx.Done():
				return
			case <-c.send.wake:
			}
		case text == "":
			if c.waitLocal(ctx, until) != nil {
				return
			}
		default:
			if err := c.post(ctx, "barrage", text, nil); err != nil {
				if ctx.Err() != nil {
					return
				}
				c.stats.sendsFailed.Add(1)
				c.log.Warn("sdk: comment not posted", "room", c.cfg.Room, "err", err)
				continue
			}
			c.stats.sendsPosted.Add(1)
		}
	}
}

// Announce posts a host or admin announcement at once, bypassing the send
// throttle, and returns its message id. It waits for the first join. A
// viewer's ticket gets an *APIError (403) from the ingest.
func (c *Client) Announce(ctx context.Context, text string) (string, error) {
	t, err := c.checkText(text)
	if err != nil {
		return "", err
	}
	if _, err := c.waitJoined(ctx); err != nil {
		return "", err
	}
	var out struct {
		OK bool   `json:"ok"`
		ID string `json:"id"`
	}
	if err := c.post(ctx, "announce", t, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// Answers of an ingest that post acts on.
const (
	// codeWrongNode: the node says the token is not its own; the next
	// address the entry named may take it.
	codeWrongNode = "wrong_node"
	// codeNotPrimary (421): a fallback ingest says the user's own node, the
	// entry's first ingest address, is live: the barrage belongs there.
	codeNotPrimary = "not_primary"
)

// Going back to the first ingest address on not_primary: at most
// maxNotPrimary times per post (a primary that fails for this client while
// the fallbacks still see it live must not hold the send loop for long; the
// fallbacks let it go a few seconds after it stops reporting), after the
// answer's Retry-After, at most maxNotPrimaryWait, defaultNotPrimaryWait
// when it names none.
const (
	maxNotPrimary         = 3
	defaultNotPrimaryWait = time.Second
	maxNotPrimaryWait     = 10 * time.Second
)

// post sends {"text": text} — with "playhead_ms" when the app gave a
// playhead clock that has a usable value (read when the comment is posted:
// the send interval holds a comment back at most 1.2 s, less than a
// reaction's own spread) — to the room's ingest endpoint path, trying the
// ingest addresses in order on network and server errors, going back to the
// first one (the user's own node) when a fallback answers 421 not_primary,
// and re-joining once if the token is refused. out, when not nil, receives
// the JSON answer.
func (c *Client) post(ctx context.Context, path, text string, out any) error {
	body, err := json.Marshal(struct {
		Text     string `json:"text"`
		Playhead int64  `json:"playhead_ms,omitempty"`
	}{text, c.sendPlayhead()})
	if err != nil {
		return fmt.Errorf("sdk: %s: %w", path, err)
	}
	s := c.sess.Load()
	rejoined := false
	notPrimary := 0
	for {
		if len(s.entry.Ingest) == 0 {
			return ErrNoIngest
		}
		var lastErr error
		for i := 0; i < len(s.entry.Ingest); i++ {
			u := strings.TrimRight(s.entry.Ingest[i], "/") + "/v1/rooms/" + c.cfg.Room + "/" + path
			err := c.postOnce(ctx, u, s.entry.Token, body, out)
			if err == nil {
				return nil
			}
			lastErr = fmt.Errorf("sdk: %s: %w", path, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ae *APIError
			if !errors.As(err, &ae) || ae.temporary() {
				continue // network or server error: the next address
			}
			if ae.Code == codeNotPrimary && i > 0 && notPrimary < maxNotPrimary {
				// The first address failed for this client, yet the
				// fallback sees it live: its failure was passing, or the
				// fallback has not seen it die yet. Back to it, after the
				// pause the fallback asks for.
				notPrimary++
				wait := ae.RetryAfter
				if wait <= 0 {
					wait = defaultNotPrimaryWait
				}
				if err := c.sleep(ctx, min(wait, maxNotPrimaryWait)); err != nil {
					return err
				}
				i = -1
				continue
			}
			// A node that says the token is not its own (wrong_node) is one
			// the entry should not have named, and one that keeps saying
			// not_primary may be alone in thinking so: the next address may
			// take it. Any other refusal is the same everywhere.
			if ae.Code != codeWrongNode && ae.Code != codeNotPrimary {
				break
			}
		}
		var ae *APIError
		if rejoined || !errors.As(lastErr, &ae) || ae.Status != http.StatusUnauthorized {
			return lastErr
		}
		if err := c.rejoin(ctx, s, c.cfg.RejoinJitter); err != nil {
			return err
		}
		s, rejoined = c.sess.Load(), true
	}
}

func (c *Client) postOnce(ctx context.Context, url, token string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxEntryBody)).Decode(out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}
