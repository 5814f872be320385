package tlsx_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"danmaku/internal/testenv"
	"danmaku/internal/tlsx"
	"danmaku/internal/tlsx/tlsxtest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestNewErrors: a pair that cannot be served stops New, naming the file.
func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	good := tlsxtest.Write(t, dir, "good")
	other := tlsxtest.Write(t, t.TempDir(), "other")
	garbage := filepath.Join(dir, "garbage.pem")
	tlsxtest.WriteFile(t, garbage, []byte("not a certificate\n"))
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name       string
		cert, key  string
		want       string // in the error
		incomplete bool
	}{
		{"no key", good.CertFile, "", "", true},
		{"no cert", "", good.KeyFile, "", true},
		{"missing cert", missing, good.KeyFile, missing, false},
		{"missing key", good.CertFile, missing, missing, false},
		{"garbage cert", garbage, good.KeyFile, garbage, false},
		{"key of another cert", good.CertFile, other.KeyFile, other.KeyFile, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tlsx.New(tlsx.Config{CertFile: c.cert, KeyFile: c.key, Logger: discard})
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, tlsx.ErrIncomplete) != c.incomplete || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v: want incomplete %v, naming %q", err, c.incomplete, c.want)
			}
		})
	}
}

// TestReload: a replaced pair is served within a poll; a bad replacement
// keeps the last good certificate and is logged once, however many polls
// see it; a good one after it is served again. It runs in a synctest
// bubble: the polls follow the fake clock, so "5 more polls" is exactly
// that on any machine.
func TestReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		first := tlsxtest.Write(t, dir, "first")
		var logs testenv.SyncBuffer
		p, err := tlsx.New(tlsx.Config{CertFile: first.CertFile, KeyFile: first.KeyFile, Poll: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		serial := func() string { return p.Certificate().Leaf.SerialNumber.String() }
		waitServed := func(want string) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second) // the bubble's clock: a guard
			for serial() != want {
				if time.Now().After(deadline) {
					t.Fatalf("serving %s, want %s", serial(), want)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if serial() != first.X509.SerialNumber.String() {
			t.Fatal("New does not serve the first pair")
		}
		second := tlsxtest.Write(t, dir, "second")
		waitServed(second.X509.SerialNumber.String())

		// Replacing a pair is two renames: a poll between them may see the new
		// certificate with the old key and log that once. Count from here on.
		before := len(logs.String())
		tlsxtest.WriteFile(t, second.CertFile, []byte("truncated\n"))
		after := func() string { return logs.String()[before:] }
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(after(), "reload failed") {
			if time.Now().After(deadline) {
				t.Fatalf("bad pair not logged; logs:\n%s", logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the bubble's clock: 5 more polls of the same bad pair
		synctest.Wait()
		if serial() != second.X509.SerialNumber.String() {
			t.Fatal("a bad pair replaced the good one")
		}
		if n := strings.Count(after(), "reload failed"); n != 1 {
			t.Fatalf("bad pair logged %d times, want once:\n%s", n, logs.String())
		}
		third := tlsxtest.Write(t, dir, "third")
		waitServed(third.X509.SerialNumber.String())
	})
}

// TestServerConfig: handshakes present the current certificate, refuse
// TLS below 1.2 and offer HTTP/1.1 only (a WebSocket upgrade needs it).
func TestServerConfig(t *testing.T) {
	c := tlsxtest.Write(t, t.TempDir(), "srv")
	p, err := tlsx.New(tlsx.Config{CertFile: c.CertFile, KeyFile: c.KeyFile, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", p.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.(*tls.Conn).Handshake()
			}()
		}
	}()
	dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer conn.Close()
		return conn.ConnectionState(), nil
	}
	cfg := tlsxtest.ClientConfig(c.X509)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	st, err := dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.NegotiatedProtocol != "http/1.1" || st.PeerCertificates[0].SerialNumber.Cmp(c.X509.SerialNumber) != 0 {
		t.Fatalf("protocol %q, serial %v", st.NegotiatedProtocol, st.PeerCertificates[0].SerialNumber)
	}
	old := tlsxtest.ClientConfig(c.X509)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := dial(old); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
}
