package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The generator retries an order as the gift API asks a business server to
// (docs/api.md): a try that failed for now (a network error, 5xx, 429) is
// sent again with the same order id — never stored twice — after a backoff
// from giftBackoff doubling to giftBackoffMax, or the answer's Retry-After
// when longer (at most giftRetryAfterMax), for Config.GiftRetryFor; only
// then is the order given up. A definitive answer (200, another 4xx) ends
// it at once. The budget must outlast a Redis failover: a gift stored but
// answered 503 in it is answered stored by a later try.
const (
	giftBackoff       = 200 * time.Millisecond
	giftBackoffMax    = 2 * time.Second
	giftRetryAfterMax = 10 * time.Second
)

// giftSample is one gift the API accepted: when it was due to be sent,
// how many decodes the pollers made of it, and how many each poller made
// (by its index in Generator.pollers; saturating at 255), so that a gift
// one viewer got twice and another never is not read as delivered.
type giftSample struct {
	sentNs    int64
	seenBy    int
	perPoller []uint8
}

// seen counts one decode of the gift by poller i.
func (s *giftSample) seen(i, pollers int) {
	s.seenBy++
	if i < 0 {
		return
	}
	if s.perPoller == nil {
		s.perPoller = make([]uint8, pollers)
	}
	if i < len(s.perPoller) && s.perPoller[i] < 255 {
		s.perPoller[i]++
	}
}

type giftRequest struct {
	OrderID string `json:"order_id"`
	Room    string `json:"room"`
	User    string `json:"user"`
	Nick    string `json:"nick,omitempty"`
	Gift    string `json:"gift"`
	Value   int64  `json:"value"`
	Count   int    `json:"count"`
}

type giftAnswer struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// giftJob is one order: its number (from 0) and when it was due.
type giftJob struct {
	n  int64
	at time.Time
}

// paceGifts issues the due gift orders, numbered from 0.
func (g *Generator) paceGifts(ctx context.Context, start time.Time, jobs chan<- giftJob) {
	var n int64
	g.pace(ctx, g.gifts, start, func(at time.Time) {
		select {
		case jobs <- giftJob{n: n, at: at}:
			n++
		default:
			g.giftOverrun.Add(1)
		}
	})
}

// giftTarget is where order n goes: the configured endpoint, or the
// handed-out ingests in turn.
func (g *Generator) giftTarget(n int64) string {
	if g.cfg.GiftIngest != "" {
		return g.cfg.GiftIngest
	}
	l := g.ingestList()
	return l[int(n%int64(len(l)))]
}

func (g *Generator) giftWorker(ctx context.Context, jobs <-chan giftJob) {
	for j := range jobs {
		n := j.n
		g.giftOrders.Add(1)
		u := g.users[int(n%int64(len(g.users)))]
		// One in five is a high-value gift: the slicer queues high- and
		// low-value gifts apart, and the edge pushes by value.
		gift, value := "rose", int64(100)
		if n%5 == 4 {
			gift, value = "rocket", 5000
		}
		body, _ := json.Marshal(giftRequest{
			OrderID: "lg-" + g.cfg.RunID + "-" + strconv.Itoa(g.cfg.Shard) + "-" + strconv.FormatInt(n, 10),
			Room:    g.cfg.Room, User: u.id, Nick: u.nick, Gift: gift, Value: value, Count: 1,
		})
		ok, answered := g.postGift(ctx, g.giftTarget(n)+"/v1/gifts", body, j.at)
		if answered {
			// From when the order was due to its last answer, retries
			// included: what the business server waited.
			g.lat.gift.Observe(time.Since(j.at))
		}
		if !ok {
			g.giftFailed.Add(1)
		}
	}
}

// postGift sends one order until it is answered 200 or a try fails for
// good, and reports whether it was accepted and whether its last try got
// an HTTP answer at all.
func (g *Generator) postGift(ctx context.Context, u string, body []byte, due time.Time) (ok, answered bool) {
	authz := []string{"Bearer " + g.cfg.GiftKey}
	backoff := giftBackoff
	giveUp := time.Now().Add(g.cfg.GiftRetryFor)
	for attempt := 1; ; attempt++ {
		g.giftAttempts.Add(1)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			g.giftStatus.add("bad_request", 1)
			return false, false
		}
		req.Header = http.Header{"Authorization": authz, "Content-Type": jsonCT}
		resp, err := g.hc.Do(req)
		var e *apiError
		switch {
		case err != nil:
			e = g.netError(err)
		case resp.StatusCode == http.StatusOK:
			var a giftAnswer
			derr := json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&a)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if derr != nil {
				g.giftStatus.add("200 undecodable", 1)
				return false, true
			}
			g.giftStatus.add("200", 1)
			switch {
			case !a.Duplicate:
				g.giftAccepted.Add(1)
			case attempt == 1:
				// A first try answered duplicate: the order id was used
				// before — never by this generator, whose ids are unique.
				g.giftDupFirst.Add(1)
			default:
				// An earlier try was stored though its answer was lost:
				// the API's idempotency at work; accepted once.
				g.giftDupRetry.Add(1)
			}
			g.giftMu.Lock()
			if _, ok := g.giftIDs[a.ID]; !ok {
				g.giftIDs[a.ID] = &giftSample{sentNs: due.UnixNano()}
			}
			g.giftMu.Unlock()
			return true, true
		default:
			e = readError(resp)
			resp.Body.Close()
		}
		g.giftStatus.add(e.Error(), 1)
		wait := min(max(backoff, e.retryAfter), giftRetryAfterMax)
		if !e.temporary() || time.Now().Add(wait).After(giveUp) {
			return false, e.status != 0
		}
		backoff = min(2*backoff, giftBackoffMax)
		select {
		case <-ctx.Done():
			return false, e.status != 0
		case <-time.After(wait):
		}
	}
}
