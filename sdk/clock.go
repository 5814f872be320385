package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// clockEstimate is an estimate of the server clock (the one that decides
// which segment a message belongs to): server time = local time + offset,
// exact to within margin when it was taken.
type clockEstimate struct {
	offset time.Duration
	margin time.Duration
	at     time.Time // local time of the sample
}

// Clock refinement. A join at show start meets a busy gslb: a long round
// trip means a wide margin, and every poll waits that margin past a
// segment's due time. So after such a join the client takes a few samples
// of GET /v1/time, spread out, and keeps the tightest.
const (
	// clockGoodMargin is a margin not worth improving.
	clockGoodMargin = 5 * time.Millisecond
	// clockSamples is how many refinement samples follow a join.
	clockSamples = 4
	// clockSampleGap is the mean wait before each; jittered ±50 %.
	clockSampleGap = 2 * time.Second
	// clockDrift bounds how far apart two clocks move: 20 ppm, above what
	// NTP-disciplined clocks do, so an old estimate's margin grows by
	// 1.2 ms a minute (the entry refresh takes a new sample every few
	// minutes).
	clockDrift = 20e-6
)

// sample turns one timed request into an estimate: serverMs was stamped
// somewhere between the local times t0 and t1.
func sample(serverMs int64, t0, t1 time.Time) clockEstimate {
	rtt := max(t1.Sub(t0), 0)
	half := (rtt + 1) / 2
	return clockEstimate{
		offset: time.UnixMilli(serverMs).Add(half).Sub(t1),
		// Round up to the millisecond the server speaks in.
		margin: half.Truncate(time.Millisecond) + time.Millisecond,
		at:     t1,
	}
}

// marginAt is e's margin at local time now, widened by the drift since.
func (e *clockEstimate) marginAt(now time.Time) time.Duration {
	age := max(now.Sub(e.at), 0)
	return e.margin + time.Duration(float64(age)*clockDrift)
}

// offerClock keeps e when it is tighter than the current estimate (as that
// one stands now, drift included).
func (c *Client) offerClock(e clockEstimate) {
	for {
		cur := c.est.Load()
		if cur != nil && cur.marginAt(e.at) <= e.margin {
			return
		}
		if c.est.CompareAndSwap(cur, &e) {
			return
		}
	}
}

// serverNow is the local clock plus the best offset known.
func (c *Client) serverNow() time.Time {
	now := c.clk.Now()
	if e := c.est.Load(); e != nil {
		return now.Add(e.offset)
	}
	return now
}

// clockMargin is the uncertainty of serverNow.
func (c *Client) clockMargin() time.Duration {
	if e := c.est.Load(); e != nil {
		return e.marginAt(c.clk.Now())
	}
	return 0
}

// refineLoop samples the server clock after each join whose margin is
// wide, until it is tight or clockSamples have been taken.
func (c *Client) refineLoop(ctx context.Context) {
	var refined *session
	for ctx.Err() == nil {
		s := c.sess.Load()
		if s == refined || c.clockMargin() <= clockGoodMargin {
			// Nothing to do until the next join.
			if c.waitFor(ctx, func() time.Duration {
				if c.sess.Load() != s {
					return 0
				}
				return time.Second
			}) != nil {
				return
			}
			continue
		}
		for range clockSamples {
			if c.sleep(ctx, clockSampleGap/2+rand.N(clockSampleGap)) != nil {
				return
			}
			if e, err := c.fetchTime(ctx); err == nil {
				c.offerClock(e)
			}
			if c.clockMargin() <= clockGoodMargin {
				break
			}
		}
		refined = s
	}
}

// fetchTime samples GET /v1/time once.
func (c *Client) fetchTime(ctx context.Context) (clockEstimate, error) {
	u := strings.TrimRight(c.cfg.EntryURL, "/") + "/v1/time"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return clockEstimate{}, err
	}
	t0 := c.clk.Now()
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return clockEstimate{}, err
	}
	defer resp.Body.Close()
	var body struct {
		ServerTimeMs int64 `json:"server_time_ms"`
	}
	if resp.StatusCode != http.StatusOK {
		return clockEstimate{}, fmt.Errorf("sdk: time: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<10)).Decode(&body); err != nil || body.ServerTimeMs <= 0 {
		return clockEstimate{}, fmt.Errorf("sdk: time: bad answer")
	}
	return sample(body.ServerTimeMs, t0, c.clk.Now()), nil
}
