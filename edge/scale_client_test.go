package edge

import (
	"bufio"
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

	"danmaku/internal/wire"
	"danmaku/internal/wsbench"
)

// The load client of BenchmarkEdgeScale runs in a child process (this test
// binary re-executed with -test.run selecting TestEdgeScaleClient), so that
// the parent's RSS, heap and CPU are the server's alone, as in
// internal/wsbench. It uses wsbench's raw client (Dial, ReadFrame) so that
// the figures are comparable with that package's candidates.
const (
	scaleChildAddr     = "EDGE_SCALE_CHILD_ADDR"     // host:port of the edge
	scaleChildTokens   = "EDGE_SCALE_CHILD_TOKENS"   // file with one token per line, one per connection
	scaleChildPlan     = "EDGE_SCALE_CHILD_PLAN"     // gifts per phase, comma-separated
	scaleChildDeadline = "EDGE_SCALE_CHILD_DEADLINE" // unix nanos after which the child gives up
	scaleChildSource   = "EDGE_SCALE_CHILD_SOURCE"   // local IP to connect from (optional)

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
	// Hist counts latencies by whole milliseconds (the last bucket: that
	// and more), so that several clients' results merge into exact
	// percentiles.
	Hist []int64 `json:"hist,omitempty"`
}

// scaleHistMs is the histogram's range.
const scaleHistMs = 10_000

// histQuantile is the q-quantile (in ms) of a merged histogram.
func histQuantile(h []int64, q float64) float64 {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := int64(q * float64(total))
	var seen int64
	for ms, n := range h {
		seen += n
		if seen > want {
			return float64(ms)
		}
	}
	return float64(len(h) - 1)
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
	var plan []int
	for f := range strings.SplitSeq(os.Getenv(scaleChildPlan), ",") {
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			return fmt.Errorf("plan %q", os.Getenv(scaleChildPlan))
		}
		plan = append(plan, k)
	}

	var (
		connected sync.WaitGroup
		phaseDone = make([]sync.WaitGroup, len(plan))
		// lats[p][i]: connection i's latencies in phase p, in ns.
		lats     = make([][][]int64, len(plan))
		errs     = make([]atomic.Int64, len(plan))
		frames   = make([]atomic.Int64, len(plan))
		errMu    sync.Mutex
		firstErr = make([]string, len(plan))
		dialErr  atomic.Value
		sem      = make(chan struct{}, 64) // handshakes in flight
	)
	for p := range plan {
		lats[p] = make([][]int64, len(tokens))
		phaseDone[p].Add(len(tokens))
	}
	connected.Add(len(tokens))
	ping := wsbench.ClientFrame(0x9, []byte("p"))
	for i, tok := range tokens {
		sem <- struct{}{}
		go func() {
			phase, seq := 0, 0
			l := make([]int64, 0, plan[0])
			defer func() {
				for ; phase < len(plan); phase++ {
					phaseDone[phase].Done()
				}
			}()
			fail := func(err error) {
				lats[phase][i] = l // what arrived before the failure
				errs[phase].Add(1)
				errMu.Lock()
				if firstErr[phase] == "" {
					firstErr[phase] = fmt.Sprintf("conn %d: %v", i, err)
				}
				errMu.Unlock()
			}
			c, br, err := wsbench.DialFrom(source, addr, tok)
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
				if c != nil {
					c.Close()
				}
				return
			}
			defer c.Close()
			connected.Done()
			// Everything from here is in order on one connection: phase
			// p's gifts 0..plan[p]-1, each once, then the end marker.
			for phase < len(plan) {
				f, err := wsbench.ReadFrame(br)
				if err != nil {
					fail(err)
					return
				}
				switch f.Op {
				case 0x9: // the edge's ping: answer it or be dropped as dead
					if _, err := c.Write(wsbench.ClientFrame(0xA, f.Payload)); err != nil {
						fail(err)
						return
					}
					continue
				case 0x8:
					fail(fmt.Errorf("closed: %x", f.Payload))
					return
				case 0x2:
				default:
					continue
				}
				now := time.Now().UnixNano()
				fr, err := wire.DecodeFrame(f.Payload)
				if err != nil {
					fail(err)
					return
				}
				frames[phase].Add(1)
				for k, m := range fr.Messages {
					if m.Kind == wire.KindSystem && m.Text == scaleEnd && phase == len(plan)-1 && seq == plan[phase] {
						if k != len(fr.Messages)-1 {
							fail(fmt.Errorf("message %s after the end marker", fr.Messages[k+1].ID))
							return
						}
						lats[phase][i] = l
						phaseDone[phase].Done()
						phase++
						continue
					}
					ph, sq, sent, err := parseScaleGift(m.Text)
					if err == nil && (m.Kind != wire.KindGift || ph != phase || sq != seq) {
						err = fmt.Errorf("got %d/%d (%s), want %d/%d", ph, sq, m.ID, phase, seq)
					}
					if err != nil {
						fail(err)
						return
					}
					l = append(l, now-sent)
					seq++
					if seq == plan[phase] && phase < len(plan)-1 {
						lats[phase][i] = l
						phaseDone[phase].Done()
						phase++
						seq, l = 0, make([]int64, 0, plan[phase])
					}
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
		phaseDone[p].Wait()
		all := slices.Concat(lats[p]...)
		slices.Sort(all)
		r := scaleResult{Phase: p, Deliveries: int64(len(all)), Frames: frames[p].Load(), Errors: errs[p].Load(), FirstErr: firstErr[p]}
		if len(all) > 0 {
			q := func(x float64) float64 { return float64(all[min(len(all)-1, int(x*float64(len(all))))]) / 1e6 }
			r.P50ms, r.P99ms, r.Maxms = q(0.50), q(0.99), float64(all[len(all)-1])/1e6
			r.Hist = make([]int64, scaleHistMs)
			top := 0
			for _, ns := range all {
				b := min(scaleHistMs-1, int(ns/1e6))
				r.Hist[b]++
				top = max(top, b)
			}
			r.Hist = r.Hist[:top+1]
		}
		j, _ := json.Marshal(r)
		fmt.Println(scaleLine+"RESULT", string(j))
	}
	return nil
}

// scaleAwaitPong reads until the pong; the read deadline then stays at the
// run's deadline, which bounds every later read.
func scaleAwaitPong(c net.Conn, br *bufio.Reader, deadline time.Time) error {
	_ = c.SetReadDeadline(deadline)
	for {
		f, err := wsbench.ReadFrame(br)
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
