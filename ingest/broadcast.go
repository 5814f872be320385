package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/internal/bucket"
	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Site-wide broadcasts are system messages every live room shows: written
// once to the site stream (stream.SiteKey, wire.Message.Site), from which
// each room's slicer leader copies them into its segments once. Two
// sources: the operator API below, and gifts worth at least
// Config.BroadcastGiftValue ("X sent 10 rockets in room R").
//
// Both are bounded at the source, per node: a broadcast costs every live
// room a message, so a runaway script or a gift storm must not turn into
// thousands of them a second.
const (
	// broadcastRate and broadcastBurst bound what the operator API
	// accepts per node; beyond, 429 broadcast_rate with a Retry-After.
	broadcastRate  = 5.0
	broadcastBurst = 20.0
	// giftBroadcastRate and giftBroadcastBurst bound the broadcasts big
	// gifts trigger per node; beyond, the gift is stored and shown in its
	// room as always, and its broadcast is left out (counted).
	giftBroadcastRate  = 5.0
	giftBroadcastBurst = 10.0
	// maxBroadcastBody bounds a broadcast request.
	maxBroadcastBody = 4 << 10
	// broadcastListMax is how many of the newest broadcasts GET lists.
	broadcastListMax = 100
	// maxBroadcastRunes bounds a broadcast's text (a banner, not a post).
	maxBroadcastRunes = 200
)

// normalizeText is normalize with the checks of shown text: not empty
// afterwards, at most maxRunes characters.
func normalizeText(s string, maxRunes int) (string, error) {
	t := normalize(s)
	switch {
	case t == "":
		return "", errors.New("text is empty after normalisation")
	case utf8.RuneCountInString(t) > maxRunes:
		return "", fmt.Errorf("text exceeds %d characters", maxRunes)
	}
	return t, nil
}

// rateBucket is a token bucket on a clock. Safe for concurrent use.
type rateBucket struct {
	rate, burst float64
	clk         clock.Clock

	mu sync.Mutex
	b  bucket.Bucket
}

func newRateBucket(rate, burst float64, clk clock.Clock) *rateBucket {
	return &rateBucket{rate: rate, burst: burst, clk: clock.Or(clk)}
}

func (b *rateBucket) take() bool {
	now := b.clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Take(now, b.burst, b.rate, 1)
}

// BroadcastAPI is the operator API for site-wide broadcasts, on gin:
//
//	POST /v1/admin/broadcasts   body {"text": "...", "nick": ""} → 201 {"id": "<site stream id>"}
//	GET  /v1/admin/broadcasts   → {"broadcasts": [...]} (the newest 100, oldest first)
//
// Every route needs an operator key (Authorization: Bearer). The text is
// checked and normalised as shown text is (at most 200 characters);
// nick, the sender shown, defaults to the operator's "system".
type BroadcastAPI struct {
	Streams stream.Store
	// Keys are the operator keys. Empty: every call is refused.
	Keys []string
	// Clock paces the rate bound. Nil: real clock.
	Clock clock.Clock
	// Registerer receives danmaku_ingest_site_broadcasts_total{source}.
	// Nil: a private registry.
	Registerer prometheus.Registerer

	once    sync.Once
	bucket  *rateBucket
	counter *prometheus.CounterVec
}

// BroadcastRequest is the body of POST /v1/admin/broadcasts.
type BroadcastRequest struct {
	Text string `json:"text"`
	Nick string `json:"nick"`
}

func (a *BroadcastAPI) init() {
	a.once.Do(func() {
		a.bucket = newRateBucket(broadcastRate, broadcastBurst, a.Clock)
		a.counter = siteBroadcastCounter(a.Registerer)
	})
}

// siteBroadcastCounter registers (or finds) the site broadcast counter.
func siteBroadcastCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_site_broadcasts_total",
		Help: "Site-wide broadcasts by source (operator, gift) and outcome (stored, rate_limited, failed).",
	}, []string{"source", "outcome"})
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
	}
	return c
}

// Register adds the routes to r.
func (a *BroadcastAPI) Register(r gin.IRoutes) {
	a.init()
	authz := func(c *gin.Context) {
		if !httpx.KeyMatches(c, a.Keys) {
			httpx.Abort(c, httpx.Errorf(http.StatusUnauthorized, "bad_operator_key", "the broadcasts API needs an operator key"))
		}
	}
	r.POST("/v1/admin/broadcasts", authz, a.post)
	r.GET("/v1/admin/broadcasts", authz, a.list)
}

func (a *BroadcastAPI) post(c *gin.Context) {
	var req BroadcastRequest
	if e := httpx.BindJSON(c, maxBroadcastBody, &req); e != nil {
		httpx.Abort(c, e)
		return
	}
	text, err := normalizeText(req.Text, maxBroadcastRunes)
	if err != nil {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_text", "%v", err))
		return
	}
	nick := req.Nick
	if nick == "" {
		nick = "system"
	}
	if n, err := normalizeText(nick, wire.MaxNickRunes); err != nil || n != nick {
		httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_nick", "nick must be 1-%d plain characters", wire.MaxNickRunes))
		return
	}
	if !a.bucket.take() {
		a.counter.WithLabelValues("operator", "rate_limited").Inc()
		e := httpx.Errorf(http.StatusTooManyRequests, "broadcast_rate", "at most %.0f broadcasts a second per node (burst %.0f); retry after the Retry-After delay", broadcastRate, broadcastBurst)
		e.RetryAfter = time.Second
		httpx.Abort(c, e)
		return
	}
	m := siteMessage(nick, text)
	out, err := a.Streams.Append(c.Request.Context(), stream.SiteKey, []wire.Message{m})
	if err != nil {
		a.counter.WithLabelValues("operator", "failed").Inc()
		e := httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "the site stream is unavailable; the broadcast may not be stored, retry")
		e.RetryAfter = time.Second
		httpx.Abort(c, e)
		return
	}
	a.counter.WithLabelValues("operator", "stored").Inc()
	c.JSON(http.StatusCreated, gin.H{"ok": true, "id": out[0].ID})
}

func (a *BroadcastAPI) list(c *gin.Context) {
	last, err := a.Streams.LastID(c.Request.Context(), stream.SiteKey)
	if err != nil {
		httpx.Abort(c, httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "the site stream is unavailable"))
		return
	}
	// The newest broadcastListMax: read forward from an hour before the
	// last id, keeping the tail (broadcasts are few; the stream is trimmed).
	after := "0-0"
	if ms, _, err := wire.ParseID(last); err == nil && ms > int64(time.Hour/time.Millisecond) {
		after = strconv.FormatInt(ms-int64(time.Hour/time.Millisecond), 10) + "-0"
	}
	var all []wire.Message
	for {
		es, err := a.Streams.Read(c.Request.Context(), stream.SiteKey, after, 500, 0)
		if err != nil {
			httpx.Abort(c, httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "the site stream is unavailable"))
			return
		}
		if len(es) == 0 {
			break
		}
		all = append(all, es...)
		if len(all) > broadcastListMax {
			all = all[len(all)-broadcastListMax:]
		}
		after = es[len(es)-1].ID
	}
	if all == nil {
		all = []wire.Message{}
	}
	c.JSON(http.StatusOK, gin.H{"broadcasts": all})
}

// siteMessage is a site-wide broadcast of text, shown as from nick.
func siteMessage(nick, text string) wire.Message {
	return wire.Message{Kind: wire.KindSystem, Role: auth.RoleOps, Nick: nick, Text: text, Site: true}
}

// giftBroadcaster turns big gifts into site-wide broadcasts.
type giftBroadcaster struct {
	streams stream.Store
	min     int64 // total value (Value × Count) that triggers; <= 0: off
	bucket  *rateBucket
	counter *prometheus.CounterVec
}

// gift broadcasts m, a gift just stored (not a resent order) in room, when
// it is worth at least the threshold and the rate bound allows. The gift
// itself is stored either way; a broadcast that cannot be written is
// counted (failed), not retried by the business server's resend (a resend
// is a duplicate order and broadcasts nothing).
func (g *giftBroadcaster) gift(ctx context.Context, room string, m wire.Message) {
	if g == nil || g.min <= 0 || !worthAtLeast(m, g.min) {
		return
	}
	if !g.bucket.take() {
		g.counter.WithLabelValues("gift", "rate_limited").Inc()
		return
	}
	who := m.Nick
	if who == "" {
		who = m.User
	}
	text := fmt.Sprintf("%s sent %d×%s in %s", who, max(m.Count, 1), m.Gift, room)
	b := siteMessage("system", wire.TruncateRunes(text, maxBroadcastRunes))
	for attempt := 0; attempt < 2; attempt++ {
		if _, err := g.streams.Append(ctx, stream.SiteKey, []wire.Message{b}); err == nil {
			g.counter.WithLabelValues("gift", "stored").Inc()
			return
		}
	}
	g.counter.WithLabelValues("gift", "failed").Inc()
}

// worthAtLeast reports whether a gift's total value (Value × max(Count, 1))
// is at least lo, without overflowing.
func worthAtLeast(m wire.Message, lo int64) bool {
	if m.Value <= 0 {
		return false
	}
	n := int64(max(m.Count, 1))
	return m.Value >= (lo+n-1)/n
}
