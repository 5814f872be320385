package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"danmaku/auth"
	"danmaku/internal/devmode"
)

// EntryPulseConfig configures RunEntryPulse: a pulse at the entry
// endpoint, closed loop, whose attempts rise from nothing to the most the
// machine sends, while a prober times /healthz. It measures what the
// rate limits let through per second and per source address.
type EntryPulseConfig struct {
	// GSLB is the entry endpoint's base URL. Zero: `danmaku dev`'s.
	GSLB string
	// Room is a room of a live event. Zero: "demo".
	Room string
	// TicketKey signs the users' tickets. Zero: the public dev key.
	TicketKey []byte
	// Users is how many distinct users' tickets the workers take turns
	// with. Zero: 2,000.
	Users int
	// Sources are the local addresses requests are sent from, one per
	// worker in turn, so that per-IP rules see several clients (on
	// Linux every 127.0.0.0/8 address is the loopback). Zero: the
	// system's choice.
	Sources []string
	// Ramp is how long the pulse lasts: the workers, each sending back to
	// back, rise evenly from 0 to Workers over it. Zero: 10 s.
	Ramp time.Duration
	// Workers is how many requests are in flight at the peak. Zero: 256.
	Workers int
	// HealthEvery is how often /healthz is probed, on its own connection.
	// Zero: 10 ms.
	HealthEvery time.Duration
	// HTTPTimeout bounds every request. Zero: 5 s.
	HTTPTimeout time.Duration
}

// Defaults of EntryPulseConfig.
const (
	defaultPulseUsers   = 2000
	defaultPulseWorkers = 256
	defaultHealthEvery  = 10 * time.Millisecond
	defaultPulseTimeout = 5 * time.Second
)

// EntryPulseReport is what RunEntryPulse measured.
type EntryPulseReport struct {
	// Seconds is how long the pulse ran.
	Seconds float64 `json:"seconds"`
	// Attempts is every entry request sent; Answers counts them by status
	// and code ("200", "200 degraded", "429 rate_limited", "503
	// overloaded", "error" for no answer).
	Attempts int64            `json:"attempts"`
	Answers  map[string]int64 `json:"answers"`
	// PerSecond is, for each whole second of the pulse, the attempts and
	// the admitted (200) answers.
	PerSecond []PulseSecond `json:"per_second"`
	// PerSource and PerSourceLimited are the admitted and the limited
	// answers per second of each source address.
	PerSource        map[string][]int64 `json:"per_source,omitempty"`
	PerSourceLimited map[string][]int64 `json:"per_source_limited,omitempty"`
	// Health is the /healthz prober's latency; HealthFailed the probes not
	// answered 200.
	Health       Summary `json:"health"`
	HealthFailed int64   `json:"health_failed"`
}

// PulseSecond is one second of a pulse.
type PulseSecond struct {
	Attempts int64 `json:"attempts"`
	Admitted int64 `json:"admitted"`
	Limited  int64 `json:"limited"`
}

// ServerErrors is how many answers were 5xx.
func (r *EntryPulseReport) ServerErrors() int64 {
	var n int64
	for k, v := range r.Answers {
		if len(k) >= 1 && k[0] == '5' {
			n += v
		}
	}
	return n
}

// Admitted returns the admitted answers of each second.
func (r *EntryPulseReport) Admitted() []int64 {
	out := make([]int64, len(r.PerSecond))
	for i, s := range r.PerSecond {
		out[i] = s.Admitted
	}
	return out
}

// Limited returns the limited (429) answers of each second.
func (r *EntryPulseReport) Limited() []int64 {
	out := make([]int64, len(r.PerSecond))
	for i, s := range r.PerSecond {
		out[i] = s.Limited
	}
	return out
}

// SaturatedRate is the mean admitted per second over the seconds in which
// some request was limited, leaving out the first of them (it spends the
// buckets' bursts): what a rule lets through once it binds. ok is false
// with fewer than two such seconds.
func SaturatedRate(perSecond []int64, limited []int64) (rate float64, ok bool) {
	var sum, n int64
	first := true
	for i := range perSecond {
		if limited[i] == 0 {
			continue
		}
		if first {
			first = false
			continue
		}
		sum += perSecond[i]
		n++
	}
	if n == 0 {
		return 0, false
	}
	return float64(sum) / float64(n), true
}

// RunEntryPulse runs the pulse until cfg.Ramp has passed or ctx ends.
func RunEntryPulse(ctx context.Context, cfg EntryPulseConfig) (*EntryPulseReport, error) {
	p, err := newPulse(cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.Ramp)
	defer cancel()
	p.start = time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { p.probe(pctx) })
	p.ramp(ctx, pctx, &wg)
	wg.Wait()
	for _, cl := range p.clients {
		cl.CloseIdleConnections()
	}
	return p.report(time.Since(p.start)), nil
}

// withDefaults fills the zero fields of cfg and checks the others.
func (cfg *EntryPulseConfig) withDefaults() error {
	if cfg.GSLB == "" {
		cfg.GSLB = devmode.GSLBURL
	}
	if cfg.Room == "" {
		cfg.Room = devmode.Room
	}
	if len(cfg.TicketKey) == 0 {
		cfg.TicketKey = auth.DevTicketKey
	}
	if cfg.Users == 0 {
		cfg.Users = defaultPulseUsers
	}
	if cfg.Ramp == 0 {
		cfg.Ramp = defaultPulseRamp
	}
	if cfg.Workers == 0 {
		cfg.Workers = defaultPulseWorkers
	}
	if cfg.HealthEvery == 0 {
		cfg.HealthEvery = defaultHealthEvery
	}
	if cfg.HTTPTimeout == 0 {
		cfg.HTTPTimeout = defaultPulseTimeout
	}
	if cfg.Users < 1 || cfg.Workers < 1 || cfg.Ramp < 0 || cfg.HealthEvery < 0 {
		return errors.New("loadgen: entry pulse: Users and Workers must be positive, Ramp and HealthEvery not negative")
	}
	return nil
}

// pulse is one run of RunEntryPulse: its users, clients and tallies.
type pulse struct {
	cfg      EntryPulseConfig
	tickets  []string
	sources  []string       // cfg.Sources, or the system's choice ("")
	clients  []*http.Client // one per source
	entryURL string
	secs     int // whole seconds of the ramp, plus the last partial one
	start    time.Time

	// Per second; per source and second.
	attempts, admitted, limited []atomic.Int64
	perSource, perSourceLimited [][]atomic.Int64

	answersMu sync.Mutex
	answers   map[string]int64
	health    Histogram
	healthBad atomic.Int64
}

// newPulse mints the users' tickets and makes a client per source.
func newPulse(cfg EntryPulseConfig) (*pulse, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	p := &pulse{cfg: cfg, sources: cfg.Sources, answers: map[string]int64{},
		entryURL: cfg.GSLB + "/v1/entry?room=" + url.QueryEscape(cfg.Room), secs: int(cfg.Ramp/time.Second) + 1}
	p.tickets = make([]string, cfg.Users)
	for i := range p.tickets {
		tk, err := auth.MintTicket(cfg.TicketKey, fmt.Sprintf("pulse-%d", i), auth.Ticket{Nick: "p"}, time.Hour)
		if err != nil {
			return nil, fmt.Errorf("loadgen: entry pulse: ticket: %w", err)
		}
		p.tickets[i] = tk
	}
	if len(p.sources) == 0 {
		p.sources = []string{""}
	}
	p.clients = make([]*http.Client, len(p.sources))
	for i, src := range p.sources {
		d := &net.Dialer{Timeout: cfg.HTTPTimeout}
		if src != "" {
			ip := net.ParseIP(src)
			if ip == nil {
				return nil, fmt.Errorf("loadgen: entry pulse: source %q is not an address", src)
			}
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
		p.clients[i] = &http.Client{Timeout: cfg.HTTPTimeout, Transport: &http.Transport{
			DialContext: d.DialContext, MaxIdleConns: cfg.Workers, MaxIdleConnsPerHost: cfg.Workers,
			IdleConnTimeout: time.Minute,
		}}
	}
	p.attempts, p.admitted, p.limited = make([]atomic.Int64, p.secs), make([]atomic.Int64, p.secs), make([]atomic.Int64, p.secs)
	p.perSource, p.perSourceLimited = make([][]atomic.Int64, len(p.sources)), make([][]atomic.Int64, len(p.sources))
	for i := range p.perSource {
		p.perSource[i] = make([]atomic.Int64, p.secs)
		p.perSourceLimited[i] = make([]atomic.Int64, p.secs)
	}
	return p, nil
}

// second is the second of the pulse now is in (the last partial one at
// most).
func (p *pulse) second() int { return min(p.secs-1, int(time.Since(p.start)/time.Second)) }

// ramp starts the workers evenly over the pulse (pctx), each in wg.
func (p *pulse) ramp(ctx, pctx context.Context, wg *sync.WaitGroup) {
	started := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for pctx.Err() == nil {
		want := min(p.cfg.Workers, int(float64(p.cfg.Workers)*float64(time.Since(p.start))/float64(p.cfg.Ramp))+1)
		for ; started < want; started++ {
			w := started
			wg.Go(func() { p.worker(ctx, pctx, w) })
		}
		select {
		case <-pctx.Done():
		case <-tick.C:
		}
	}
}

// worker w sends entry requests back to back until the pulse (pctx) ends.
func (p *pulse) worker(ctx, pctx context.Context, w int) {
	src := w % len(p.sources)
	client := p.clients[src]
	for n := w; pctx.Err() == nil; n += p.cfg.Workers {
		// Sent under ctx, not the pulse's: a request sent before the
		// end is answered and counted in its second, which would
		// otherwise lose what was still in flight.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.entryURL, nil)
		req.Header.Set("Authorization", "Bearer "+p.tickets[n%len(p.tickets)])
		sec := p.second()
		p.attempts[sec].Add(1)
		resp, err := client.Do(req)
		key := "error"
		if err == nil {
			key = p.tally(resp, src, sec)
		} else if ctx.Err() != nil {
			p.attempts[sec].Add(-1) // the caller gave up: not answered
			return
		}
		p.answersMu.Lock()
		p.answers[key]++
		p.answersMu.Unlock()
	}
}

// tally counts an answer in its second and source, and returns its key in
// Answers.
func (p *pulse) tally(resp *http.Response, src, sec int) string {
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	key := strconv.Itoa(resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusOK:
		p.admitted[sec].Add(1)
		p.perSource[src][sec].Add(1)
		if bytes.Contains(body, []byte(`"degraded":true`)) {
			key += " degraded"
		}
	case resp.StatusCode == http.StatusTooManyRequests:
		p.limited[sec].Add(1)
		p.perSourceLimited[src][sec].Add(1)
		key += " " + errorCodeOf(body)
	default:
		key += " " + errorCodeOf(body)
	}
	return key
}

// probe times /healthz until the pulse (pctx) ends: one connection of its
// own, at a fixed pace, so that its latency is the server's answer to a
// health check under the pulse.
func (p *pulse) probe(pctx context.Context) {
	hc := &http.Client{Timeout: p.cfg.HTTPTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t := time.NewTicker(p.cfg.HealthEvery)
	defer t.Stop()
	for {
		select {
		case <-pctx.Done():
			return
		case <-t.C:
		}
		req, _ := http.NewRequestWithContext(pctx, http.MethodGet, p.cfg.GSLB+"/healthz", nil)
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			if pctx.Err() == nil {
				p.healthBad.Add(1)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.health.Observe(time.Since(t0))
		if resp.StatusCode != http.StatusOK {
			p.healthBad.Add(1)
		}
	}
}

// report sums the tallies of a pulse that lasted elapsed.
func (p *pulse) report(elapsed time.Duration) *EntryPulseReport {
	rep := &EntryPulseReport{Seconds: elapsed.Seconds(), Answers: p.answers, Health: p.health.Summary(), HealthFailed: p.healthBad.Load()}
	for i := range p.secs {
		ps := PulseSecond{Attempts: p.attempts[i].Load(), Admitted: p.admitted[i].Load(), Limited: p.limited[i].Load()}
		rep.Attempts += ps.Attempts
		// Only whole seconds are rates; the pulse's last moments (its
		// end rarely falls on a second) are in the totals only.
		if time.Duration(i+1)*time.Second <= elapsed {
			rep.PerSecond = append(rep.PerSecond, ps)
		}
	}
	if len(p.cfg.Sources) > 0 {
		rep.PerSource, rep.PerSourceLimited = map[string][]int64{}, map[string][]int64{}
		for i, src := range p.cfg.Sources {
			for j := range rep.PerSecond {
				rep.PerSource[src] = append(rep.PerSource[src], p.perSource[i][j].Load())
				rep.PerSourceLimited[src] = append(rep.PerSourceLimited[src], p.perSourceLimited[i][j].Load())
			}
		}
	}
	return rep
}

// errorCodeOf is the code of a coded JSON error body, or "?".
func errorCodeOf(body []byte) string {
	const k = `"code":"`
	i := bytes.Index(body, []byte(k))
	if i < 0 {
		return "?"
	}
	rest := body[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "?"
	}
	return string(rest[:j])
}

// WriteText writes the report for people: answers, the admitted rate per
// second, the health prober's latency.
func (r *EntryPulseReport) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "entry pulse: %.1f s, %d attempts (%.0f/s)\n", r.Seconds, r.Attempts, float64(r.Attempts)/r.Seconds)
	keys := make([]string, 0, len(r.Answers))
	for k := range r.Answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-22s %d\n", k, r.Answers[k])
	}
	fmt.Fprintf(&b, "  second  attempts  admitted  limited\n")
	for i, s := range r.PerSecond {
		fmt.Fprintf(&b, "  %6d  %8d  %8d  %7d\n", i, s.Attempts, s.Admitted, s.Limited)
	}
	srcs := make([]string, 0, len(r.PerSource))
	for s := range r.PerSource {
		srcs = append(srcs, s)
	}
	sort.Strings(srcs)
	for _, s := range srcs {
		fmt.Fprintf(&b, "  admitted/s from %s: %v\n", s, r.PerSource[s])
	}
	fmt.Fprintf(&b, "  /healthz: %d probes, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %d failed\n",
		r.Health.Count, r.Health.P50Ms, r.Health.P99Ms, r.Health.MaxMs, r.HealthFailed)
	_, err := w.Write(b.Bytes())
	return err
}
