package edge

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"danmaku/edge/edgetest"
)

// BenchmarkHelloWait measures what a socket waiting for its hello (a
// browser's, upgraded without an Authorization header, its first frame not
// sent yet) costs the edge: EDGE_HELLO_WAITS such sockets (default 300),
// opened by a child process (this binary re-run as TestHelloWaitClient) so
// that what is measured here is the server's alone. It reports VmRSS and
// HeapInuse+StackInuse growth and goroutines ÷ waiting sockets, after a
// GC, once every socket waits.
//
// "loop": plain sockets, which wait in the epoll loops (Linux); "goroutines":
// the same sockets behind a listener that hides their *net.TCPConn, as TLS
// does, which wait on net/http's goroutine — what every waiting socket cost
// before the loops held them. Both in one run:
//
//	for i in 1 2 3; do EDGE_HELLO_WAITS=2000 go test -run '^$' -bench HelloWait -benchtime 1x ./edge; done
func BenchmarkHelloWait(b *testing.B) {
	n := envInt("EDGE_HELLO_WAITS", 300)
	for _, kind := range socketKinds {
		b.Run(kind.name, func(b *testing.B) {
			for range b.N {
				runHelloWait(b, n, kind.wrap)
			}
		})
	}
}

// helloChildWaits is how many sockets the child opens.
const helloChildWaits = "EDGE_HELLO_CHILD_WAITS"

func runHelloWait(b *testing.B, n int, wrap func(net.Listener) net.Listener) {
	b.StopTimer()
	e := newEnv(b, envOpts{wrap: wrap, cfg: func(c *Config) {
		// Nothing times out or is refused while it is measured.
		c.HelloTimeout = time.Hour
		c.ConnectRate, c.MaxHelloWaits, c.MaxHelloWaitsPerAddr = -1, -1, -1
	}})
	settle()
	before := edgetest.SampleMemory()
	deadline := time.Now().Add(time.Minute + time.Duration(n)*2*time.Millisecond)
	b.StartTimer()
	child := startScaleChild(b, "hello client", "TestHelloWaitClient", []string{
		scaleChildAddr + "=" + e.ts.Listener.Addr().String(),
		helloChildWaits + "=" + strconv.Itoa(n),
		scaleChildDeadline + "=" + strconv.FormatInt(deadline.UnixNano(), 10),
	})
	child.next("READY", deadline)
	waitFor(b, "every socket to wait", func() bool { return e.srv.hellos.n.Load() == int64(n) })
	b.StopTimer()
	settle()
	held := edgetest.SampleMemory()
	fn := float64(n)
	b.ReportMetric(float64(held.RSS-before.RSS)/fn, "rss-B/wait")
	b.ReportMetric(float64(held.HeapStack-before.HeapStack)/fn, "heap+stack-B/wait")
	b.ReportMetric(float64(held.Goroutines-before.Goroutines)/fn, "goroutines/wait")
	// The child's sockets close with it: the waits end.
	child.stdin.Close()
	waitFor(b, "every wait to end", func() bool { return e.srv.Load().Conns == 0 })
	e.srv.cfg.DrainPeriod = time.Millisecond
}

// TestHelloWaitClient is BenchmarkHelloWait's client: it upgrades its
// sockets without a token, sends nothing, prints READY and holds them
// until its stdin closes (the parent is done or gone) or the deadline.
func TestHelloWaitClient(t *testing.T) {
	addr := os.Getenv(scaleChildAddr)
	n, _ := strconv.Atoi(os.Getenv(helloChildWaits))
	if addr == "" || n == 0 {
		t.Skip("the client of BenchmarkHelloWait")
	}
	dl, _ := strconv.ParseInt(os.Getenv(scaleChildDeadline), 10, 64)
	time.AfterFunc(time.Until(time.Unix(0, dl))+5*time.Second, func() {
		fmt.Println(scaleLine+"ERROR", "deadline")
		os.Exit(3)
	})
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, _, err := edgetest.Dial(addr, "")
		if err != nil {
			fmt.Println(scaleLine+"ERROR", "socket", i, err)
			os.Exit(1)
		}
		conns = append(conns, c)
	}
	fmt.Println(scaleLine + "READY")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the parent never writes: EOF only
	for _, c := range conns {
		c.Close()
	}
	os.Exit(0)
}
