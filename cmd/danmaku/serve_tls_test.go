package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"danmaku/internal/stack"
	"danmaku/internal/testenv"
	"danmaku/internal/tlsx/tlsxtest"
)

// tlsRoles are the roles that terminate TLS themselves: their flags, their
// environment and the scheme they then listen on.
var tlsRoles = []struct {
	role, env, scheme string
	files             func(stack.Config) (cert, key string)
}{
	{stack.RoleEdge, "DANMAKU_EDGE_TLS_", "wss://", func(c stack.Config) (string, string) { return c.EdgeTLSCert, c.EdgeTLSKey }},
	{stack.RoleIngest, "DANMAKU_INGEST_TLS_", "https://", func(c stack.Config) (string, string) { return c.IngestTLSCert, c.IngestTLSKey }},
}

// TestServeTLSFlags: for the edge and the ingest, the two files reach the
// stack from flags or the environment, and one without the other is a
// usage error.
func TestServeTLSFlags(t *testing.T) {
	for _, r := range tlsRoles {
		t.Run(r.role, func(t *testing.T) {
			parse := func(args ...string) (cert, key string, err error) {
				t.Helper()
				cfg, _, err := parseServe(t, r.role, args...)
				cert, key = r.files(cfg)
				return cert, key, err
			}
			flag := "-" + r.role + "-tls-"
			for _, tr := range tlsRoles {
				t.Setenv(tr.env+"CERT", "")
				t.Setenv(tr.env+"KEY", "")
			}
			cert, key, err := parse(flag+"cert", "/etc/node/cert.pem", flag+"key", "/etc/node/key.pem")
			if err != nil || cert != "/etc/node/cert.pem" || key != "/etc/node/key.pem" {
				t.Fatalf("cert %q key %q err %v", cert, key, err)
			}
			if cert, key, err := parse(); err != nil || cert != "" || key != "" {
				t.Fatalf("default: cert %q key %q err %v", cert, key, err)
			}
			for _, half := range [][]string{{flag + "cert", "c.pem"}, {flag + "key", "k.pem"}} {
				_, _, err := parse(half...)
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), flag+"cert and "+flag+"key") {
					t.Fatalf("%v: err %v, want a usage error naming both flags", half, err)
				}
			}
			t.Setenv(r.env+"CERT", "/run/cert.pem")
			t.Setenv(r.env+"KEY", "/run/key.pem")
			if cert, key, err := parse(); err != nil || cert != "/run/cert.pem" || key != "/run/key.pem" {
				t.Fatalf("from the environment: cert %q key %q err %v", cert, key, err)
			}
		})
	}
}

// TestServeTLS: `danmaku edge` and `danmaku ingest` with a certificate say
// they listen on wss:// and https://; with one that does not load they stop
// at start, naming the file, with a plain error (not a usage error: the
// flags were well formed).
func TestServeTLS(t *testing.T) {
	for _, r := range tlsRoles {
		t.Setenv(r.env+"CERT", "")
		t.Setenv(r.env+"KEY", "")
	}
	t.Setenv("DANMAKU_EDGE_URL", "")
	t.Setenv("DANMAKU_INGEST_URL", "")
	t.Setenv("DANMAKU_REDIS", "")
	// Both verify tokens: with no Redis each runs its own auth center.
	t.Setenv("DANMAKU_MASTER_KEY", strings.Repeat("ab", 32))
	t.Setenv("DANMAKU_GIFT_KEYS", "tls-test-gift-key")
	for _, r := range tlsRoles {
		t.Run(r.role, func(t *testing.T) {
			dir := t.TempDir()
			c := tlsxtest.Write(t, dir, r.role)
			run := roleCmd(r.role)
			args := func(cert, key string) []string {
				return []string{"-" + r.role, "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-audit-dir", t.TempDir(), "-log-level", "error",
					"-" + r.role + "-tls-cert", cert, "-" + r.role + "-tls-key", key}
			}

			missing := filepath.Join(dir, "missing.pem")
			var out, errOut testenv.SyncBuffer
			err := run(context.Background(), args(missing, c.KeyFile), &out, &errOut)
			var ue usageError
			if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), missing) {
				t.Fatalf("missing certificate: err %v", err)
			}

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- run(ctx, args(c.CertFile, c.KeyFile), &out, &errOut) }()
			// Started, or stopped early: whichever comes first, however
			// long a loaded machine takes (the test binary's -timeout is
			// the guard against a hang).
			started := make(chan bool, 1)
			go func() { started <- out.WaitFor(ctx, "press Ctrl-C") }()
			select {
			case <-started:
			case err := <-done:
				cancel()
				t.Fatalf("%s stopped before it started: %v; stdout:\n%s\nstderr:\n%s", r.role, err, out.String(), errOut.String())
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("%s: %v\n%s", r.role, err, errOut.String())
			}
			if !strings.Contains(out.String(), "listening on "+r.scheme+"127.0.0.1:") {
				t.Fatalf("stdout:\n%s", out.String())
			}
		})
	}
}
