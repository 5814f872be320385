package stack

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
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
	"danmaku/internal/testwait"
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
		EdgeTLSCert: first.CertFile, EdgeTLSKey: first.KeyFile, TLSPoll: 20 * time.Millisecond,
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
	awaitRenewal(t, second, func() (string, error) { return dialEdge(t, d, e.Edge[0], e.Token) })
	// Once renewed, a client trusting only the new certificate connects.
	d.TLSClientConfig = tlsxtest.ClientConfig(second.X509)
	if _, err := dialEdge(t, d, e.Edge[0], e.Token); err != nil {
		t.Fatalf("wss connect after renewal: %v", err)
	}
}

// TestIngestTLS: given a certificate, the ingest serves HTTPS on its
// address as the edge serves WSS (TLS 1.2 at least, HTTP/1.1 only), the
// gslb hands out its https:// URL, a viewer's comment posts over it with
// a token bound to that URL, plain HTTP to the port gets no answer of the
// ingest's, and a renewed certificate is served within a poll, without a
// restart.
func TestIngestTLS(t *testing.T) {
	dir := t.TempDir()
	first := tlsxtest.Write(t, dir, "ingest-first")
	st := startStack(t, Config{
		Events:        []event.Event{liveEvent("tls")},
		IngestTLSCert: first.CertFile, IngestTLSKey: first.KeyFile, TLSPoll: 20 * time.Millisecond,
	})
	ingestURL := st.URLs[RoleIngest]
	if !strings.HasPrefix(ingestURL, "https://127.0.0.1:") {
		t.Fatalf("ingest URL %q, want https://", ingestURL)
	}
	e := fetchEntry(t, st.URLs[RoleGSLB], "tls", ticket(t, "alice", auth.RoleViewer))
	if len(e.Ingest) == 0 || e.Ingest[0] != ingestURL {
		t.Fatalf("entry hands out ingests %v, want %s", e.Ingest, ingestURL)
	}
	client := func(cfg *tls.Config) *http.Client {
		// ForceAttemptHTTP2: the client offers h2; the ingest must pick
		// HTTP/1.1, as the edge does.
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
	}
	// served sends req and returns the serial number of the certificate
	// the ingest presented, checking the protocol and the status.
	served := func(c *http.Client, req *http.Request, want int) (string, error) {
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.TLS == nil || resp.ProtoMajor != 1 || resp.StatusCode != want {
			return "", fmt.Errorf("%s %s: TLS %v, %s, status %d (want %d)", req.Method, req.URL.Path, resp.TLS != nil, resp.Proto, resp.StatusCode, want)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
	}
	c := client(tlsxtest.ClientConfig(first.X509))
	req, _ := http.NewRequest(http.MethodPost, e.Ingest[0]+"/v1/rooms/tls/barrage", strings.NewReader(`{"text":"over TLS"}`))
	req.Header.Set("Authorization", "Bearer "+e.Token)
	req.Header.Set("Content-Type", "application/json")
	if got, err := served(c, req, http.StatusOK); err != nil || got != first.X509.SerialNumber.String() {
		t.Fatalf("barrage over https: served %s, err %v", got, err)
	}

	// Plain HTTP to the TLS port: net/http's own 400, never the ingest.
	plain := "http://" + strings.TrimPrefix(ingestURL, "https://") + "/healthz"
	if resp, err := http.Get(plain); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain http answered by the TLS ingest")
		}
	}
	// Below TLS 1.2: no handshake.
	old := tlsxtest.ClientConfig(first.X509)
	old.MaxVersion = tls.VersionTLS11
	health, _ := http.NewRequest(http.MethodGet, ingestURL+"/healthz", nil)
	if _, err := served(client(old), health, http.StatusOK); err == nil {
		t.Fatal("a TLS 1.1 client connected")
	}

	second := tlsxtest.Write(t, dir, "ingest-second")
	c = client(tlsxtest.ClientConfig(first.X509, second.X509))
	awaitRenewal(t, second, func() (string, error) {
		// A fresh connection each time: a kept-alive one would show the
		// certificate of its own handshake.
		c.CloseIdleConnections()
		return served(c, health, http.StatusOK)
	})
	if _, err := served(client(tlsxtest.ClientConfig(second.X509)), health, http.StatusOK); err != nil {
		t.Fatalf("https after renewal: %v", err)
	}
}

// awaitRenewal connects until the certificate served (the serial number
// connect returns) is renewed's: within a poll of the files, without a
// restart. Every connect must succeed meanwhile.
func awaitRenewal(t *testing.T, renewed tlsxtest.Cert, connect func() (string, error)) {
	t.Helper()
	deadline := time.Now().Add(testwait.Limit) // a guard, not a speed requirement
	for {
		got, err := connect()
		if err != nil {
			t.Fatalf("connect during renewal: %v", err)
		}
		if got == renewed.X509.SerialNumber.String() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving %s after renewal", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTLSExplicitURL: an operator's -edge-url or -ingest-url is what
// clients are handed, TLS or not (a name on the certificate, another
// port).
func TestTLSExplicitURL(t *testing.T) {
	c := tlsxtest.Write(t, t.TempDir(), "node")
	for _, tt := range []struct {
		role, public string
		cfg          Config
	}{
		{RoleEdge, "wss://edge-1.example.com/v1/ws", Config{EdgeTLSCert: c.CertFile, EdgeTLSKey: c.KeyFile, EdgeURL: "wss://edge-1.example.com/v1/ws"}},
		{RoleIngest, "https://ingest-1.example.com", Config{IngestTLSCert: c.CertFile, IngestTLSKey: c.KeyFile, IngestURL: "https://ingest-1.example.com"}},
	} {
		t.Run(tt.role, func(t *testing.T) {
			if u := startStack(t, tt.cfg).URLs[tt.role]; u != tt.public {
				t.Fatalf("%s URL %q, want %q", tt.role, u, tt.public)
			}
		})
	}
}

// TestTLSRefused: for the edge and the ingest alike, half a pair, or a
// pair that does not load, stops the stack in New, naming what is wrong;
// nothing is left listening.
func TestTLSRefused(t *testing.T) {
	dir := t.TempDir()
	good := tlsxtest.Write(t, dir, "role")
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	tlsxtest.WriteFile(t, garbage, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	for _, role := range []struct {
		name  string
		field string
		set   func(c *Config, addr, cert, key string)
	}{
		{RoleEdge, "Edge", func(c *Config, addr, cert, key string) { c.EdgeAddr, c.EdgeTLSCert, c.EdgeTLSKey = addr, cert, key }},
		{RoleIngest, "Ingest", func(c *Config, addr, cert, key string) {
			c.IngestAddr, c.IngestTLSCert, c.IngestTLSKey = addr, cert, key
		}},
	} {
		for _, c := range []struct {
			name       string
			cert, key  string
			want       string
			incomplete bool
		}{
			{"cert only", good.CertFile, "", role.field + "TLSKey", true},
			{"key only", "", good.KeyFile, role.field + "TLSCert", true},
			{"missing cert", missing, good.KeyFile, missing, false},
			{"garbage cert", garbage, good.KeyFile, garbage, false},
			{"cert as key", good.CertFile, good.CertFile, good.CertFile, false},
		} {
			t.Run(role.name+"/"+c.name, func(t *testing.T) {
				// A known port, to see that New releases it when it refuses.
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				ln.Close()
				cfg := Config{Dev: true, Roles: []string{role.name}}
				role.set(&cfg, addr, c.cert, c.key)
				if _, err = New(cfg); err == nil {
					t.Fatal("New accepted it")
				}
				if errors.Is(err, tlsx.ErrIncomplete) != c.incomplete || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), role.name+" TLS") {
					t.Fatalf("err %v: want incomplete %v, naming %q and the role", err, c.incomplete, c.want)
				}
				if ln, err = net.Listen("tcp", addr); err != nil {
					t.Fatalf("New left %s bound: %v", addr, err)
				}
				ln.Close()
			})
		}
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
