package stack

import (
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/tlsx/tlsxtest"
)

// cpuTime is the process's user and system CPU so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConnectTLS is the connect rate of an edge with token
// verification, with and without TLS: every op is a new TCP connection,
// TLS handshake (wss), WebSocket upgrade and token check, then a close.
// connects/s is over the whole run at GOMAXPROCS clients;
// cpu-µs/connect is the process's CPU per connect — the clients' share
// (their half of each handshake) included, as the two run in one process.
// Admission limits are off: they would measure the limits, not the edge.
func BenchmarkConnectTLS(b *testing.B) {
	cert := tlsxtest.Write(b, b.TempDir(), "bench")
	for _, c := range []struct {
		name string
		tls  bool
	}{{"ws", false}, {"wss", true}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := Config{Events: []event.Event{liveEvent("bench")}, EdgeConnectRate: -1, EdgeMaxUserConns: -1}
			d := &websocket.Dialer{
				HandshakeTimeout: 10 * time.Second,
				NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if tc, ok := conn.(*net.TCPConn); ok {
						// Close with a reset: a run of many thousand
						// connects would otherwise fill the ephemeral
						// ports with TIME_WAIT.
						_ = tc.SetLinger(0)
					}
					return conn, err
				},
			}
			if c.tls {
				cfg.EdgeTLSCert, cfg.EdgeTLSKey = cert.CertFile, cert.KeyFile
				d.TLSClientConfig = tlsxtest.ClientConfig(cert.X509)
			}
			st := startStack(b, cfg)
			tk, err := auth.MintTicket(auth.DevTicketKey, "bench", auth.Ticket{Nick: "bench", Role: auth.RoleViewer}, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			e := fetchEntry(b, st.URLs[RoleGSLB], "bench", tk)
			hdr := http.Header{"Authorization": {"Bearer " + e.Token}}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, t0 := cpuTime(b), time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ws, _, err := d.Dial(e.Edge[0], hdr)
					if err != nil {
						b.Error(err)
						return
					}
					ws.Close()
				}
			})
			elapsed, cpu := time.Since(t0), cpuTime(b)-cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "connects/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/connect")
		})
	}
}
