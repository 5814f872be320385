package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
	"danmaku/sdk/wire"
)

// smallBufListener shrinks the send buffer of the n-th accepted connection
// (counting from 1) so that its client, when it does not read, blocks the
// server's writes quickly.
type smallBufListener struct {
	net.Listener
	n        int
	accepted atomic.Int64
}

func (l *smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && l.accepted.Add(1) == int64(l.n) {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// TestSlowClient: a client that never reads is closed with CloseResume once
// its queue is full, while the room's other client still gets everything.
func TestSlowClient(t *testing.T) {
	e := newEnv(t, envOpts{
		cfg: func(c *Config) {
			c.QueueSize = 2
			c.RingSize = 16
			c.MergeWindow = minMergeWindow
			c.WriteTimeout = 2 * safety // the stuck write must outlive the test's wait
		},
		wrap: func(l net.Listener) net.Listener { return &smallBufListener{Listener: l, n: 2} },
	})
	fast := e.connect("r1", "") // first connection: normal buffers
	slowDialer := &websocket.Dialer{
		HandshakeTimeout: safety,
		// Before connect, so that the advertised window is small too.
		NetDialContext: (&net.Dialer{Control: smallRcvBuf}).DialContext,
	}
	slow, _, err := e.dialWith(slowDialer, e.token("r1"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()

	var fastGot []wire.Message
	var fastErr error
	fastDone := make(chan struct{})
	go func() {
		defer close(fastDone)
		fastGot, fastErr = readUntil(fast, "r1", func(ms []wire.Message) bool {
			return len(ms) > 0 && ms[len(ms)-1].Text == "end"
		})
	}()

	big := strings.Repeat("x", 32<<10)
	var all []string
	for counter(e.srv.m.slow) == 0 {
		if len(all) > 5000 {
			t.Fatal("the slow client was never disconnected")
		}
		m := gift(1, 0)
		m.Text = big
		all = append(all, e.append("r1", m)[0].ID)
		time.Sleep(10 * time.Millisecond) // a message or two per frame: easy for the fast client
	}
	t.Logf("%d messages until the slow client was closed", len(all))
	all = append(all, e.append("r1", sys("end"))[0].ID)
	<-fastDone
	if fastErr != nil {
		t.Fatalf("fast client: %v", fastErr)
	}
	sameIDs(t, "fast client", fastGot, all)

	// The slow client now reads: a gap-free prefix, then the resume code.
	got, err := readUntil(slow, "r1", func([]wire.Message) bool { return false })
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != CloseResume {
		t.Fatalf("slow client ended with %v, want close code %d", err, CloseResume)
	}
	if len(got) >= len(all) {
		t.Fatalf("slow client got all %d messages", len(got))
	}
	sameIDs(t, "slow client prefix", got, all[:len(got)])
	waitFor(t, "the slow client to be gone", func() bool { return e.srv.Load().Conns == 1 })
	if n := counter(e.srv.m.closes.WithLabelValues(reasonResume)); n != 1 {
		t.Fatalf("closes{resume} = %v, want 1", n)
	}
}

// TestDeadConnection: a client that answers no ping is dropped; one that
// does stays.
func TestDeadConnection(t *testing.T) {
	// A grace of 3 s: a loaded machine running -race starved the alive
	// client's reader for longer than the 200 ms this once had, and the
	// alive client must not be dropped too. The silent one is dropped
	// whatever the grace; the test waits for it, never times it.
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.PingInterval, c.PongGrace = 20*time.Millisecond, 3*time.Second }})
	alive := e.connect("r1", "")
	msgs := make(chan []wire.Message, 1)
	errc := make(chan error, 1)
	var end string
	var endMu sync.Mutex
	go func() { // reading answers pings
		got, err := readUntil(alive, "r1", func(ms []wire.Message) bool {
			endMu.Lock()
			defer endMu.Unlock()
			return end != "" && len(ms) > 0 && ms[len(ms)-1].ID == end
		})
		msgs <- got
		errc <- err
	}()

	dead := e.connect("r1", "") // never reads, so never answers a ping
	_ = dead
	waitFor(t, "the two clients", func() bool { return e.srv.OnlineRooms()["r1"] == 2 })
	waitFor(t, "the silent client to be dropped", func() bool { return e.srv.Load().Conns == 1 })

	endMu.Lock()
	end = e.append("r1", sys("still there?"))[0].ID
	endMu.Unlock()
	if err := <-errc; err != nil {
		t.Fatalf("live client: %v", err)
	}
	sameIDs(t, "live client", <-msgs, []string{end})
}

// TestDeadConnectionsReleased: connections that answer no ping are closed
// and release everything they held — their slots, their room's hub, their
// goroutines and, within a margin, their memory.
func TestDeadConnectionsReleased(t *testing.T) {
	const silent = 200
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.PingInterval, c.PongGrace = 50*time.Millisecond, 50*time.Millisecond }})
	settle := func() (int, uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	g0, heap0 := settle()
	conns := make([]*websocket.Conn, silent)
	d := &websocket.Dialer{HandshakeTimeout: safety}
	for i := range conns {
		// Dialled here, not by e.connect, whose cleanup would keep every
		// client's buffers alive; never read, so never answers a ping.
		ws, _, err := e.dialWith(d, e.token(fmt.Sprintf("room-%d", i%4)), "")
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = ws
	}
	waitFor(t, "every silent client to be dropped", func() bool { return e.srv.Load().Conns == 0 && e.srv.roomCount() == 0 })
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil // the client side's buffers are not the server's to free
	if n := counter(e.srv.m.closes.WithLabelValues(reasonGone)); n != silent {
		t.Errorf("closes{gone} = %v, want %d", n, silent)
	}
	// The client side's goroutines end with their sockets; the server's
	// with the connections.
	var g int
	var heap uint64
	// The node's own goroutines (the site reader, the pinger and up to
	// maxLoops epoll loops) start with the first connection and stay.
	waitFor(t, "the goroutines to end", func() bool { g, heap = settle(); return g <= g0+2+maxLoops })
	// Each connection held tens of KiB while open; what is left must be
	// far less than one connection's worth per connection.
	t.Logf("heap %d KiB before, %d KiB after %d connections came and went", heap0>>10, heap>>10, silent)
	if heap > heap0+uint64(silent)*4<<10 {
		t.Errorf("heap %d KiB after the drops, %d KiB before: connections left memory behind", heap>>10, heap0>>10)
	}
}

// TestClientReportsBounded: a connection's counter reports add at most
// ReportRate a second of its life to the client metrics (a full
// ReportWindow at connect), at most one per ReportEvery; what is refused
// is counted by reason. Once two connections added 15 million drops in 6 s.
func TestClientReportsBounded(t *testing.T) {
	clk := clock.NewFake(time.Now())
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.Clock = clk
		c.ReportRate, c.ReportWindow, c.ReportEvery = 10, 10*time.Second, 5*time.Second // at most 100
	}})
	ws := e.connect("r1", "")
	refused := func(reason string) float64 { return counter(e.srv.m.reportsRefused.WithLabelValues(reason)) }
	steps := []struct {
		advance            time.Duration
		report             string
		drops, held        float64 // the metrics after it
		overBound, tooSoon float64
	}{
		{0, `{"drops":100}`, 100, 0, 0, 0},                   // a full window at connect
		{0, `{"drops":1}`, 100, 0, 0, 1},                     // within ReportEvery
		{5 * time.Second, `{"drops":1000000}`, 100, 0, 1, 1}, // 50 earned
		{0, `{"drops":30,"held":20}`, 130, 20, 1, 1},         // the 50, summed
		{5 * time.Second, `{"drops":51}`, 130, 20, 2, 1},     // 50 earned again
		{20 * time.Second, `{"held":101}`, 130, 20, 3, 1},    // the window caps what 20 s earn
		{0, `{"held":100,"token":""}`, 130, 120, 3, 1},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		if err := ws.WriteMessage(websocket.TextMessage, []byte(st.report)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("step %d (%s) to be counted", i, st.report), func() bool {
			return refused(reportOverBound) == st.overBound && refused(reportTooOften) == st.tooSoon &&
				counter(e.srv.m.renderDrops) == st.drops && counter(e.srv.m.heldSends) == st.held
		})
	}
}

// TestClientReports: counter reports reach the metrics; junk is counted
// and ignored; a flood is closed with ClosePolicy.
func TestClientReports(t *testing.T) {
	e := newEnv(t, envOpts{})
	ws := e.connect("r1", "")
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"drops": 3, "held": 2, "future": 1}`)); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"drops": -1}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reports", func() bool {
		return counter(e.srv.m.renderDrops) == 3 && counter(e.srv.m.heldSends) == 2 && counter(e.srv.m.badReports) == 1
	})

	for range 3 * clientMsgBurst {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"drops":1}`)); err != nil {
			break // closed under us
		}
	}
	_, err := readUntil(ws, "r1", func([]wire.Message) bool { return false })
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != ClosePolicy {
		t.Fatalf("flooding client ended with %v, want close code %d", err, ClosePolicy)
	}

	// Pings count against the same allowance: a ping flood is closed too.
	wsp := e.connect("r1", "")
	for range 3 * clientMsgBurst {
		if err := wsp.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(time.Second)); err != nil {
			break
		}
	}
	_, err = readUntil(wsp, "r1", func([]wire.Message) bool { return false })
	if !errors.As(err, &ce) || ce.Code != ClosePolicy {
		t.Fatalf("ping-flooding client ended with %v, want close code %d", err, ClosePolicy)
	}

	// A message above ReadLimit ends the connection too.
	ws2 := e.connect("r1", "")
	_ = ws2.WriteMessage(websocket.TextMessage, []byte(strings.Repeat(" ", defaultReadLimit+1)))
	if _, err := readUntil(ws2, "r1", func([]wire.Message) bool { return false }); err == nil {
		t.Fatal("oversized client message did not end the connection")
	}
	waitFor(t, "all gone", func() bool { return e.srv.Load().Conns == 0 })
}

// TestShutdown: draining refuses new clients, reports Draining, closes every
// connection with CloseGoingAway and removes the node from the load table.
func TestShutdown(t *testing.T) {
	table := loadtable.NewMemoryTable()
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.LoadTable = table
		c.NodeID = "edge-1"
		c.DrainPeriod = 500 * time.Millisecond
	}})
	runErr := make(chan error, 1)
	go func() { runErr <- e.srv.Run(context.Background()) }()

	const clients = 20
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		room := "r1"
		if i%2 == 1 {
			room = "r2"
		}
		conns[i] = e.connect(room, "")
	}
	waitFor(t, "a load report with every client", func() bool {
		s, _ := table.Snapshot(context.Background())
		return len(s) == 1 && s[0].ID == "edge-1" && s[0].Conns == clients
	})
	// The online counts go to the table's online side, once a second.
	waitFor(t, "the online counts", func() bool {
		on, _ := table.Online(context.Background())
		return on["edge-1"]["r1"] == clients/2 && on["edge-1"]["r2"] == clients/2
	})

	shutErr := make(chan error, 1)
	go func() { shutErr <- e.srv.Shutdown(context.Background()) }()
	waitFor(t, "a draining report", func() bool {
		s, _ := table.Snapshot(context.Background())
		return len(s) == 1 && s[0].Draining
	})
	_, resp, err := e.dialWith(&websocket.Dialer{}, e.token("r1"), "")
	if err == nil {
		t.Fatal("a new connection was accepted while draining")
	}
	checkCoded(t, resp, http.StatusServiceUnavailable, CodeDraining)
	hresp, err := http.Get(e.ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz while draining: %d", hresp.StatusCode)
	}

	var wg sync.WaitGroup
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := readUntil(ws, "", func([]wire.Message) bool { return false })
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != CloseGoingAway {
				t.Errorf("client %d ended with %v, want close code %d", i, err, CloseGoingAway)
			}
		}()
	}
	wg.Wait()
	if err := <-shutErr; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := e.srv.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v", err)
	}
	if s, _ := table.Snapshot(context.Background()); len(s) != 0 {
		t.Fatalf("node still in the load table after shutdown: %+v", s)
	}
	if on, _ := table.Online(context.Background()); len(on) != 0 {
		t.Fatalf("online counts still in the table after shutdown: %v", on)
	}
	if n := counter(e.srv.m.closes.WithLabelValues(reasonDraining)); n != clients {
		t.Fatalf("closes{draining} = %v, want %d", n, clients)
	}
}

// TestRunContext: cancelling Run's context drains like Shutdown.
func TestRunContext(t *testing.T) {
	e := newEnv(t, envOpts{})
	ws := e.connect("r1", "")
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- e.srv.Run(ctx) }()
	cancel()
	_, err := readUntil(ws, "r1", func([]wire.Message) bool { return false })
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != CloseGoingAway {
		t.Fatalf("client ended with %v, want close code %d", err, CloseGoingAway)
	}
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !e.srv.Load().Draining {
		t.Fatal("Load does not report Draining after Run ended")
	}
}

func TestDrainBatches(t *testing.T) {
	tests := []struct {
		n, steps int
		batches  int
	}{
		{0, 100, 0},
		{1, 100, 1},
		{20, 100, 20},
		{100, 100, 100},
		{1001, 100, 100},
		{100_000, 100, 100},
	}
	for _, tt := range tests {
		b := drainBatches(tt.n, tt.steps)
		if len(b) != tt.batches {
			t.Fatalf("drainBatches(%d, %d): %d batches, want %d", tt.n, tt.steps, len(b), tt.batches)
		}
		next, biggest := 0, 0
		for _, x := range b {
			if x[0] != next || x[1] <= x[0] {
				t.Fatalf("drainBatches(%d, %d): batch %v after %d", tt.n, tt.steps, x, next)
			}
			next, biggest = x[1], max(biggest, x[1]-x[0])
		}
		if next != tt.n || (tt.n > 0 && biggest > (tt.n+tt.steps-1)/tt.steps) {
			t.Fatalf("drainBatches(%d, %d) = %v", tt.n, tt.steps, b)
		}
	}
}

func TestRing(t *testing.T) {
	r := newRing(4)
	id := func(ms int64) msgID { return msgID{ms: ms} }
	for ms := int64(1); ms <= 6; ms++ {
		old, ok := r.push(entry{id: id(ms), msg: wire.Message{ID: id(ms).String()}})
		if wantEvict := ms > 4; ok != wantEvict || (ok && old.id != id(ms-4)) {
			t.Fatalf("push %d: evicted %v %v", ms, old.id, ok)
		}
	}
	// Holds 3..6.
	tests := []struct {
		after int64
		want  int
	}{{0, 0}, {2, 0}, {3, 1}, {5, 3}, {6, 4}, {9, 4}}
	for _, tt := range tests {
		if got := r.after(id(tt.after)); got != tt.want {
			t.Fatalf("after(%d) = %d, want %d", tt.after, got, tt.want)
		}
	}
	if got := ids(r.slice(1, 3)); strings.Join(got, ",") != "4-0,5-0" {
		t.Fatalf("slice(1,3) = %v", got)
	}
	if r.slice(2, 2) != nil {
		t.Fatal("empty slice not nil")
	}
}
