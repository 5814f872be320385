package edge

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/edge/edgetest"
	"danmaku/internal/hist"
	"danmaku/sdk/wire"
)

// The load client of BenchmarkEdgeScale runs in a child process (this test
// binary re-executed with -test.run selecting TestEdgeScaleClient), so that
// the parent's RSS, heap and CPU are the server's alone, as in the
// WebSocket candidates' comparison (docs/benchmarks.md). It uses the raw
// client of edgetest (Dial, ReadFrame), the one that comparison used, so
// that the figures are comparable with its candidates'.
const (
	scaleChildAddr     = "EDGE_SCALE_CHILD_ADDR"     // host:port of the edge
	scaleChildTokens   = "EDGE_SCALE_CHILD_TOKENS"   // file with one token per line, one per connection
	scaleChildPlan     = "EDGE_SCALE_CHILD_PLAN"     // gifts per phase, comma-separated
	scaleChildDeadline = "EDGE_SCALE_CHILD_DEADLINE" // unix nanos after which the child gives up
	scaleChildSource   = "EDGE_SCALE_CHILD_SOURCE"   // local IP to connect from (optional)
	// scaleChildTLS names the PEM certificate of an edge that terminates
	// TLS: the client connects over TLS trusting it. Empty: plain TCP.
	scaleChildTLS = "EDGE_SCALE_CHILD_TLS"
	// scaleChildReaders = "go" reads every connection with a goroutine of
	// its own, as TLS needs, even where an epoll loop could read plain
	// ones: a plain run to compare with a TLS one loads the client alike.
	scaleChildReaders = "EDGE_SCALE_CHILD_READERS"

	// scaleLine prefixes the child's protocol lines on stdout: the testing
	// package prints there too ("PASS").
	scaleLine = "EDGESCALE "
	// scaleEnd is the text of the system message appended after the last
	// gift: reading it next proves nothing was duplicated at the end.
	scaleEnd = "end"
)

// scaleResult is what the child measured in one phase.
type scaleResult struct {
	Phase      int     `json:"phase"`
	Deliveries int64   `json:"deliveries"` // gifts received in order, once each
	Frames     int64   `json:"frames"`     // binary frames received, over all connections
	Errors     int64   `json:"errors"`     // connections that failed in this phase
	FirstErr   string  `json:"first_err,omitempty"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	Maxms      float64 `json:"max_ms"`
	// Hist holds the latencies, so that several clients' results merge
	// into exact percentiles.
	Hist hist.Data `json:"hist"`
}

// scaleGiftText is the Text of the seq-th gift of a phase: the client reads
// the phase, the order and the append time from it (Text survives
// wire.Slim; the clock is the same machine's).
func scaleGiftText(phase, seq int, sent time.Time) string {
	return fmt.Sprintf("%d/%d/%d", phase, seq, sent.UnixNano())
}

func parseScaleGift(s string) (phase, seq int, sent int64, err error) {
	p := strings.Split(s, "/")
	if len(p) != 3 {
		return 0, 0, 0, fmt.Errorf("gift text %q", s)
	}
	if phase, err = strconv.Atoi(p[0]); err == nil {
		if seq, err = strconv.Atoi(p[1]); err == nil {
			sent, err = strconv.ParseInt(p[2], 10, 64)
		}
	}
	return phase, seq, sent, err
}

// TestEdgeScaleClient is BenchmarkEdgeScale's load client; it does nothing
// unless the benchmark started this process.
func TestEdgeScaleClient(t *testing.T) {
	addr := os.Getenv(scaleChildAddr)
	if addr == "" {
		t.Skip("the load client of BenchmarkEdgeScale")
	}
	if err := runScaleClient(addr); err != nil {
		fmt.Println(scaleLine+"ERROR", err)
		os.Exit(1)
	}
}

// runScaleClient connects every token's connection, pings each and waits
// for its pong (so the server has read from it too), prints READY, then
// prints RESULT <json> as each phase's gifts have reached every connection.
// It exits when its stdin closes (the parent is gone) or past the deadline,
// so it never outlives the benchmark.
func runScaleClient(addr string) error {
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the parent never writes: EOF only
		os.Exit(2)
	}()
	dl, _ := strconv.ParseInt(os.Getenv(scaleChildDeadline), 10, 64)
	deadline := time.Unix(0, dl)
	time.AfterFunc(time.Until(deadline)+5*time.Second, func() {
		fmt.Println(scaleLine+"ERROR", "deadline")
		os.Exit(3)
	})
	b, err := os.ReadFile(os.Getenv(scaleChildTokens))
	if err != nil {
		return err
	}
	tokens := strings.Fields(string(b))
	var source net.Addr
	if ip := os.Getenv(scaleChildSource); ip != "" {
		source = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	dial := func(tok string) (net.Conn, *bufio.Reader, error) { return edgetest.DialFrom(source, addr, tok) }
	if certFile := os.Getenv(scaleChildTLS); certFile != "" {
		tc, err := scaleTLSConfig(certFile, addr)
		if err != nil {
			return err
		}
		dial = func(tok string) (net.Conn, *bufio.Reader, error) {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second, LocalAddr: source}, Config: tc}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return nil, nil, err
			}
			br, err := edgetest.Handshake(c, addr, tok)
			return c, br, err
		}
	}
	var plan []int
	for f := range strings.SplitSeq(os.Getenv(scaleChildPlan), ",") {
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			return fmt.Errorf("plan %q", os.Getenv(scaleChildPlan))
		}
		plan = append(plan, k)
	}

	run := &scaleRun{
		plan:      plan,
		phaseDone: make([]sync.WaitGroup, len(plan)),
		lats:      make([][][]int64, len(plan)),
		errs:      make([]atomic.Int64, len(plan)),
		frames:    make([]atomic.Int64, len(plan)),
		firstErr:  make([]string, len(plan)),
	}
	var (
		connected sync.WaitGroup
		dialErr   atomic.Value
		sem       = make(chan struct{}, 64) // handshakes in flight
	)
	for p := range plan {
		run.lats[p] = make([][]int64, len(tokens))
		run.phaseDone[p].Add(len(tokens))
	}
	connected.Add(len(tokens))
	// Connections are read by an epoll loop where there is one (Linux):
	// 10,000 reading goroutines would cost the shared cores more than the
	// edge under test, and the edge's writes would wake them one by one.
	var poll *scalePoller
	if os.Getenv(scaleChildTLS) == "" && os.Getenv(scaleChildReaders) != "go" {
		poll = newScalePoller()
	}
	ping := edgetest.ClientFrame(0x9, []byte("p"))
	for i, tok := range tokens {
		sem <- struct{}{}
		go func() {
			sc := &scaleConn{run: run, i: i, l: make([]int64, 0, plan[0])}
			c, br, err := dial(tok)
			if err == nil {
				_, err = c.Write(ping)
			}
			if err == nil {
				err = scaleAwaitPong(c, br, deadline)
			}
			<-sem
			if err != nil {
				dialErr.CompareAndSwap(nil, fmt.Errorf("conn %d: %w", i, err))
				connected.Done()
				sc.finish()
				if c != nil {
					c.Close()
				}
				return
			}
			if poll != nil {
				var pre []byte
				if br.Buffered() > 0 {
					pre, _ = br.Peek(br.Buffered())
				}
				if err := poll.add(c, pre, sc); err != nil {
					sc.fail(err)
					sc.finish()
				}
				connected.Done()
				return
			}
			defer sc.finish()
			defer c.Close()
			connected.Done()
			for {
				f, err := edgetest.ReadFrame(br)
				if err != nil {
					sc.fail(err)
					return
				}
				pong, stop := sc.frame(f.Op, f.Payload, time.Now().UnixNano())
				if pong != nil {
					if _, err := c.Write(pong); err != nil {
						sc.fail(err)
						return
					}
				}
				if stop {
					return
				}
			}
		}()
	}
	connected.Wait()
	if err, _ := dialErr.Load().(error); err != nil {
		return err
	}
	fmt.Println(scaleLine + "READY")
	for p := range plan {
		run.phaseDone[p].Wait()
		run.errMu.Lock()
		all := slices.Concat(run.lats[p]...)
		first := run.firstErr[p]
		run.errMu.Unlock()
		r := scaleResult{Phase: p, Deliveries: int64(len(all)), Frames: run.frames[p].Load(), Errors: run.errs[p].Load(), FirstErr: first}
		var h hist.Histogram
		for _, ns := range all {
			h.Observe(time.Duration(ns)) // below 0 (a wall clock stepped back): 0
		}
		sum := h.Summary()
		r.P50ms, r.P99ms, r.Maxms, r.Hist = sum.P50Ms, sum.P99Ms, sum.MaxMs, h.Data()
		j, _ := json.Marshal(r)
		fmt.Println(scaleLine+"RESULT", string(j))
	}
	return nil
}

// scaleTLSConfig trusts the certificate in certFile for addr's host.
func scaleTLSConfig(certFile, addr string) (*tls.Config, error) {
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("no certificate in %s", certFile)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	// No session cache: every connection pays a full handshake, as
	// viewers arriving at a show do.
	return &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// scaleAwaitPong reads until the pong; the read deadline then stays at the
// run's deadline, which bounds every later read.
func scaleAwaitPong(c net.Conn, br *bufio.Reader, deadline time.Time) error {
	_ = c.SetReadDeadline(deadline)
	for {
		f, err := edgetest.ReadFrame(br)
		if err != nil {
			return err
		}
		switch f.Op {
		case 0xA:
			return nil
		case 0x8:
			return fmt.Errorf("closed: %x", f.Payload)
		}
	}
}

// scaleRun is what every connection of the client reports into.
type scaleRun struct {
	plan      []int
	phaseDone []sync.WaitGroup
	frames    []atomic.Int64
	errs      []atomic.Int64
	errMu     sync.Mutex
	// lats[p][i]: connection i's latencies in phase p, in ns; firstErr[p]:
	// the phase's first failure. Both under errMu.
	lats     [][][]int64
	firstErr []string
}

// scaleConn is one connection's progress: everything on it is in order,
// phase p's gifts 0..plan[p]-1, each once, then the end marker.
type scaleConn struct {
	run        *scaleRun
	i          int
	phase, seq int
	l          []int64
	stopped    bool
}

// frame handles one frame from the edge: the pong to send for a ping, and
// whether the connection is done (every phase, or failed).
func (sc *scaleConn) frame(op byte, payload []byte, now int64) (pong []byte, stop bool) {
	run := sc.run
	switch op {
	case 0x9: // the edge's ping: answer it or be dropped as dead
		return edgetest.ClientFrame(0xA, payload), false
	case 0x8:
		sc.fail(fmt.Errorf("closed: %x", payload))
		return nil, true
	case 0x2:
	default:
		return nil, false
	}
	fr, err := wire.DecodeFrame(payload)
	if err != nil {
		sc.fail(err)
		return nil, true
	}
	run.frames[sc.phase].Add(1)
	for k, m := range fr.Messages {
		if m.Kind == wire.KindSystem && m.Text == scaleEnd && sc.phase == len(run.plan)-1 && sc.seq == run.plan[sc.phase] {
			if k != len(fr.Messages)-1 {
				sc.fail(fmt.Errorf("message %s after the end marker", fr.Messages[k+1].ID))
				return nil, true
			}
			sc.endPhase()
			return nil, true
		}
		ph, sq, sent, err := parseScaleGift(m.Text)
		if err == nil && (m.Kind != wire.KindGift || ph != sc.phase || sq != sc.seq) {
			err = fmt.Errorf("got %d/%d (%s), want %d/%d", ph, sq, m.ID, sc.phase, sc.seq)
		}
		if err != nil {
			sc.fail(err)
			return nil, true
		}
		sc.l = append(sc.l, now-sent)
		sc.seq++
		if sc.seq == run.plan[sc.phase] && sc.phase < len(run.plan)-1 {
			sc.endPhase()
			sc.seq, sc.l = 0, make([]int64, 0, run.plan[sc.phase])
		}
	}
	return nil, false
}

func (sc *scaleConn) endPhase() {
	sc.run.errMu.Lock()
	sc.run.lats[sc.phase][sc.i] = sc.l
	sc.run.errMu.Unlock()
	sc.run.phaseDone[sc.phase].Done()
	sc.phase++
}

// fail counts the connection as failed in its phase, keeping what arrived
// before; finish then ends its phases.
func (sc *scaleConn) fail(err error) {
	if sc.stopped || sc.phase >= len(sc.run.plan) {
		return
	}
	run := sc.run
	run.errs[sc.phase].Add(1)
	run.errMu.Lock()
	run.lats[sc.phase][sc.i] = sc.l
	if run.firstErr[sc.phase] == "" {
		run.firstErr[sc.phase] = fmt.Sprintf("conn %d: %v", sc.i, err)
	}
	run.errMu.Unlock()
}

// finish marks every phase the connection did not complete as done.
func (sc *scaleConn) finish() {
	if sc.stopped {
		return
	}
	sc.stopped = true
	for ; sc.phase < len(sc.run.plan); sc.phase++ {
		sc.run.phaseDone[sc.phase].Done()
	}
}
