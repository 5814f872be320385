package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"danmaku/auth"
	"danmaku/sdk/wire"
)

// user is one simulated viewer who comments. Users are reused for the whole
// run, as real viewers are: each holds its entry (ingest addresses and
// dynamic token) and re-fetches it only when the token is near its end or
// refused, so the gslb sees a realistic join and refresh load rather than
// an entry per comment.
type user struct {
	id, nick string
	ticket   string

	sess atomic.Pointer[session]
	mu   sync.Mutex // serialises this user's re-entries

	// nextAt is when the user's client throttle lets it post again; read
	// and written by the barrage pacer only.
	nextAt time.Time
}

// session is one entry answer, as the senders use it. Immutable; a re-entry
// or a fail-over to the next ingest swaps in a new one.
type session struct {
	entry      wire.Entry
	ingestIdx  int
	barrageURL string
	authz      []string // the Authorization header's value, shared by every request
	refreshAt  time.Time
}

// newSession is entry e fetched at fetched. every (Config.RefreshEvery)
// brings the re-fetch forward when positive.
func newSession(e wire.Entry, room string, fetched time.Time, every time.Duration) *session {
	s := &session{entry: e, authz: []string{"Bearer " + e.Token}}
	s.barrageURL = e.Ingest[0] + "/v1/rooms/" + url.PathEscape(room) + "/barrage"
	// Re-fetch at 80 % of the token's life, as the SDK does, before the
	// ingest starts refusing it.
	life := time.Duration(e.TokenExpiresMs-e.ServerTimeMs) * time.Millisecond
	after := life * 8 / 10
	if every > 0 {
		after = min(after, every)
	}
	s.refreshAt = fetched.Add(max(after, time.Second))
	return s
}

// next is the same entry on its next ingest address: the SDK's fallback
// when the best one cannot be reached.
func (s *session) next(room string) *session {
	n := *s
	n.ingestIdx = (s.ingestIdx + 1) % len(s.entry.Ingest)
	n.barrageURL = s.entry.Ingest[n.ingestIdx] + "/v1/rooms/" + url.PathEscape(room) + "/barrage"
	return &n
}

// primary is the same entry on its first ingest address, the user's own
// node: where the SDK goes back when a fallback answers 421 not_primary.
func (s *session) primary(room string) *session {
	if s.ingestIdx == 0 {
		return s
	}
	n := *s
	n.ingestIdx = 0
	n.barrageURL = s.entry.Ingest[0] + "/v1/rooms/" + url.PathEscape(room) + "/barrage"
	return &n
}

// apiError is a coded error answer ({"error":{"code":…}}) or a transport
// failure, reduced to the key the report counts it under.
type apiError struct {
	status     int    // 0: no answer
	code       string // the server's code, or a class of network error
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	if e.status == 0 {
		return "network: " + e.code
	}
	return strconv.Itoa(e.status) + " " + e.code
}

// temporary reports whether the same request may succeed later.
func (e *apiError) temporary() bool {
	return e.status == 0 || e.status >= 500 || e.status == http.StatusTooManyRequests
}

// readError reads a non-2xx answer's code and Retry-After.
func readError(resp *http.Response) *apiError {
	e := &apiError{status: resp.StatusCode, code: "http_" + strconv.Itoa(resp.StatusCode)}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.code = body.Error.Code
	}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
		e.retryAfter = time.Duration(n) * time.Second
	}
	return e
}

// netError classifies a transport failure for the report: the kinds say
// whether the generator or the server gave up.
func netError(err error) *apiError {
	var ue *url.Error
	code := "error"
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ue) && ue.Timeout()):
		code = "timeout"
	case errors.Is(err, context.Canceled):
		code = "canceled"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		code = "eof"
	case containsAny(err.Error(), "connection refused"):
		code = "refused"
	case containsAny(err.Error(), "connection reset", "broken pipe"):
		code = "reset"
	case containsAny(err.Error(), "too many open files"):
		code = "too_many_open_files"
	}
	return &apiError{code: code}
}

// netError is netError(err), the first raw text of its class kept for
// the report (Report.NetworkErrors): the class alone cannot tell a
// connection the server closed while idle from one broken mid-answer.
func (g *Generator) netError(err error) *apiError {
	e := netError(err)
	if _, ok := g.netTexts.Load(e.code); !ok {
		g.netTexts.LoadOrStore(e.code, err.Error())
	}
	return e
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// ticketFor returns u's business ticket: minted with the ticket key, or in
// `danmaku dev` fetched from its dev ticket endpoint (which mints with the
// same public key, so the two are equivalent; the endpoint only proves the
// target is a dev stack and costs a request).
func (g *Generator) ticketFor(ctx context.Context, id, nick string) (string, error) {
	if !g.cfg.DevTickets {
		return auth.MintTicket(g.cfg.TicketKey, id, auth.Ticket{Nick: nick}, g.cfg.Duration+2*time.Hour)
	}
	u := g.cfg.GSLB + "/v1/dev/ticket?user=" + url.QueryEscape(id) + "&nick=" + url.QueryEscape(nick)
	var out struct {
		Ticket string `json:"ticket"`
	}
	if err := g.getJSON(ctx, u, "", &out); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound {
			return "", fmt.Errorf("GET /v1/dev/ticket: 404: the gslb is not `danmaku dev`; mint tickets with DANMAKU_TICKET_KEY instead")
		}
		return "", fmt.Errorf("GET /v1/dev/ticket: %w", err)
	}
	return out.Ticket, nil
}

func (g *Generator) getJSON(ctx context.Context, u, bearer string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return g.netError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// entryAttempts bounds the retries of one entry fetch: a fresh stack
// answers 503 until its nodes have reported, a busy gslb 503 with
// Retry-After; a real client retries with back-off, and so does this.
const entryAttempts = 5

// fetchEntry gets u an entry, retrying temporary failures. Every answered
// request is timed; every failed one counted under its code.
func (g *Generator) fetchEntry(ctx context.Context, u *user) (*session, error) {
	if u.ticket == "" {
		t, err := g.ticketFor(ctx, u.id, u.nick)
		if err != nil {
			g.entryErrs.add("ticket", 1)
			return nil, err
		}
		u.ticket = t
	}
	endpoint := g.cfg.GSLB + "/v1/entry?room=" + url.QueryEscape(g.cfg.Room)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var e wire.Entry
		start := time.Now()
		err := g.getJSON(ctx, endpoint, u.ticket, &e)
		var ae *apiError
		if err == nil || (errors.As(err, &ae) && ae.status != 0) {
			g.observeEntry(time.Since(start))
		}
		if err == nil && len(e.Ingest) == 0 {
			err = &apiError{status: http.StatusOK, code: "no_ingest"}
		}
		if err == nil {
			return newSession(e, g.cfg.Room, start, g.cfg.RefreshEvery), nil
		}
		key := err.Error()
		if ae != nil {
			key = ae.Error()
		}
		g.entryErrs.add(key, 1)
		if ae == nil || !ae.temporary() || attempt >= entryAttempts || ctx.Err() != nil {
			return nil, fmt.Errorf("entry for %s: %w", u.id, err)
		}
		wait := max(backoff, ae.retryAfter)
		backoff = min(2*backoff, 2*time.Second)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// probeEntries fetches, every EntryProbeEvery until ctx ends, a fresh
// entry for the next user in turn, as a viewer re-entering would, so that
// the entry endpoint is timed over the whole offer (Report.Timeline); the
// answer is discarded. At most a few probes are in flight: a slow gslb
// skips probes rather than pile them up.
func (g *Generator) probeEntries(ctx context.Context) {
	if g.cfg.EntryProbeEvery < 0 || len(g.users) == 0 {
		return
	}
	t := time.NewTicker(g.cfg.EntryProbeEvery)
	defer t.Stop()
	slots := make(chan struct{}, maxEntryProbes)
	var wg sync.WaitGroup
	defer wg.Wait()
	for next := 0; ; next = (next + 1) % len(g.users) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue
		}
		u := g.users[next]
		wg.Go(func() {
			defer func() { <-slots }()
			g.entryProbes.Add(1)
			probe := &user{id: u.id, nick: u.nick, ticket: u.ticket}
			// The end of the offer stops the probes, not a probe under
			// way: cancelled, it would count as an entry error.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.HTTPTimeout)
			defer cancel()
			_, _ = g.fetchEntry(pctx, probe) // timed and counted by fetchEntry
		})
	}
}

// maxEntryProbes bounds the entry probes in flight.
const maxEntryProbes = 4

// sessionOf returns u's session, re-fetching the entry when the token is
// near its end or was refused.
func (g *Generator) sessionOf(ctx context.Context, u *user) (*session, error) {
	if s := u.sess.Load(); s != nil && time.Now().Before(s.refreshAt) {
		return s, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.sess.Load(); s != nil && time.Now().Before(s.refreshAt) {
		return s, nil
	}
	s, err := g.fetchEntry(ctx, u)
	if err != nil {
		return nil, err
	}
	g.refreshes.Add(1)
	u.sess.Store(s)
	g.noteIngests(s.entry.Ingest)
	return s, nil
}

// hintFor turns the first user's refused entry into advice: the usual
// causes are the wrong key or a room outside any live event.
func hintFor(err error, devKey bool) string {
	var ae *apiError
	if !errors.As(err, &ae) {
		return ""
	}
	switch ae.code {
	case "bad_ticket":
		if devKey {
			return " (tickets were minted with the public dev key, which only `danmaku dev` accepts: set DANMAKU_TICKET_KEY to the deployment's ticket key)"
		}
		return " (DANMAKU_TICKET_KEY is not the key this gslb verifies tickets with)"
	case "no_such_room", "room_not_live":
		return " (rooms exist only inside a live event: `danmaku event create -f FILE`, docs/api.md)"
	}
	return ""
}
