package stack

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/tlsx"
	"danmaku/internal/tlsx/tlsxtest"
)

// dialEdge opens a WebSocket to the edge with the entry's token in the
// Authorization header (checked before the upgrade, so a 101 means TLS,
// the upgrade and the token all passed) and returns the serial number of
// the certificate the edge presented.
func dialEdge(t *testing.T, d *websocket.Dialer, url, token string) (string, error) {
	t.Helper()
	ws, resp, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		if resp != nil {
			return "", errors.Join(err, errors.New(resp.Status))
		}
		return "", err
	}
	defer ws.Close()
	// gorilla reads the 101 off the raw connection: resp.TLS is unset.
	tc, ok := ws.NetConn().(*tls.Conn)
	if !ok {
		return "", errors.New("connected without TLS")
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestEdgeTLS: given a certificate, the edge serves WSS on its address,
// the gslb hands out its wss:// URL, a viewer's token connects over it,
// and a renewed certificate is served within a poll, without a restart.
func TestEdgeTLS(t *testing.T) {
	dir := t.TempDir()
	first := tlsxtest.Write(t, dir, "edge-first")
	st := startStack(t, Config{
		Events:      []event.Event{liveEvent("tls")},
		EdgeTLSCert: first.CertFile, EdgeTLSKey: first.KeyFile, EdgeTLSPoll: 20 * time.Millisecond,
		// Every dial below is a new connection of the same user.
		EdgeMaxUserConns: -1,
	})
	if u := st.URLs[RoleEdge]; !strings.HasPrefix(u, "wss://127.0.0.1:") {
		t.Fatalf("edge URL %q, want wss://", u)
	}
	e := fetchEntry(t, st.URLs[RoleGSLB], "tls", ticket(t, "alice", auth.RoleViewer))
	if len(e.Edge) == 0 || e.Edge[0] != st.URLs[RoleEdge] {
		t.Fatalf("entry hands out edges %v, want %s", e.Edge, st.URLs[RoleEdge])
	}
	d := &websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: tlsxtest.ClientConfig(first.X509)}
	got, err := dialEdge(t, d, e.Edge[0], e.Token)
	if err != nil {
		t.Fatalf("wss connect: %v", err)
	}
	if got != first.X509.SerialNumber.String() {
		t.Fatalf("served certificate %s, want %s", got, first.X509.SerialNumber)
	}
	// Plain WebSocket to a TLS port is no connection.
	plain := "ws://" + strings.TrimPrefix(e.Edge[0], "wss://")
	if _, err := dialEdge(t, &websocket.Dialer{HandshakeTimeout: 5 * time.Second}, plain, e.Token); err == nil {
		t.Fatal("plain ws connected to the TLS edge")
	}

	second := tlsxtest.Write(t, dir, "edge-second")
	d.TLSClientConfig = tlsxtest.ClientConfig(first.X509, second.X509)
	deadline := time.Now().Add(10 * time.Second) // a guard, not a speed requirement
	for {
		got, err := dialEdge(t, d, e.Edge[0], e.Token)
		if err != nil {
			t.Fatalf("wss connect during renewal: %v", err)
		}
		if got == second.X509.SerialNumber.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving %s after renewal", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Once renewed, a client trusting only the new certificate connects.
	d.TLSClientConfig = tlsxtest.ClientConfig(second.X509)
	if _, err := dialEdge(t, d, e.Edge[0], e.Token); err != nil {
		t.Fatalf("wss connect after renewal: %v", err)
	}
}

// TestEdgeTLSExplicitURL: an operator's -edge-url is what clients are
// handed, TLS or not (a balancer's port, a name on the certificate).
func TestEdgeTLSExplicitURL(t *testing.T) {
	c := tlsxtest.Write(t, t.TempDir(), "edge")
	const public = "wss://edge-1.example.com/v1/ws"
	st := startStack(t, Config{EdgeTLSCert: c.CertFile, EdgeTLSKey: c.KeyFile, EdgeURL: public})
	if u := st.URLs[RoleEdge]; u != public {
		t.Fatalf("edge URL %q, want %q", u, public)
	}
}

// TestEdgeTLSRefused: half a pair, or a pair that does not load, stops the
// stack in New, naming what is wrong; nothing is left listening.
func TestEdgeTLSRefused(t *testing.T) {
	dir := t.TempDir()
	good := tlsxtest.Write(t, dir, "edge")
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	tlsxtest.WriteFile(t, garbage, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	for _, c := range []struct {
		name       string
		cert, key  string
		want       string
		incomplete bool
	}{
		{"cert only", good.CertFile, "", "EdgeTLSKey", true},
		{"key only", "", good.KeyFile, "EdgeTLSCert", true},
		{"missing cert", missing, good.KeyFile, missing, false},
		{"garbage cert", garbage, good.KeyFile, garbage, false},
		{"cert as key", good.CertFile, good.CertFile, good.CertFile, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A known port, to see that New releases it when it refuses.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			cfg := Config{Dev: true, Roles: []string{RoleEdge}, EdgeAddr: addr, EdgeTLSCert: c.cert, EdgeTLSKey: c.key}
			if _, err = New(cfg); err == nil {
				t.Fatal("New accepted it")
			}
			if errors.Is(err, tlsx.ErrIncomplete) != c.incomplete || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v: want incomplete %v, naming %q", err, c.incomplete, c.want)
			}
			if ln, err = net.Listen("tcp", addr); err != nil {
				t.Fatalf("New left %s bound: %v", addr, err)
			}
			ln.Close()
		})
	}
}

// TestHandshakeQuiet: failed TLS handshakes, which a public port sees all
// day, go to debug; whatever else net/http reports stays a warning.
func TestHandshakeQuiet(t *testing.T) {
	var buf bytes.Buffer
	l := handshakeQuiet(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Printf("http: TLS handshake error from 192.0.2.1:4242: EOF")
	l.Printf("http: panic serving 192.0.2.1:4242: boom")
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="http: TLS handshake error`) || !strings.Contains(out, `level=WARN msg="http: panic serving`) {
		t.Fatalf("log:\n%s", out)
	}
}
