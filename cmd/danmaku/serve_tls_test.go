package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/testenv"
	"danmaku/internal/tlsx/tlsxtest"
)

// TestServeEdgeTLSFlags: the two files reach the stack from flags or the
// environment, and one without the other is a usage error.
func TestServeEdgeTLSFlags(t *testing.T) {
	parse := func(args ...string) (stack.Config, error) {
		t.Helper()
		cfg, _, err := parseServe(t, "edge", args...)
		return cfg, err
	}
	t.Setenv("DANMAKU_EDGE_TLS_CERT", "")
	t.Setenv("DANMAKU_EDGE_TLS_KEY", "")
	cfg, err := parse("-edge-tls-cert", "/etc/edge/cert.pem", "-edge-tls-key", "/etc/edge/key.pem")
	if err != nil || cfg.EdgeTLSCert != "/etc/edge/cert.pem" || cfg.EdgeTLSKey != "/etc/edge/key.pem" {
		t.Fatalf("cert %q key %q err %v", cfg.EdgeTLSCert, cfg.EdgeTLSKey, err)
	}
	if cfg, err := parse(); err != nil || cfg.EdgeTLSCert != "" || cfg.EdgeTLSKey != "" {
		t.Fatalf("default: cert %q key %q err %v", cfg.EdgeTLSCert, cfg.EdgeTLSKey, err)
	}
	for _, half := range [][]string{{"-edge-tls-cert", "c.pem"}, {"-edge-tls-key", "k.pem"}} {
		_, err := parse(half...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "-edge-tls-cert and -edge-tls-key") {
			t.Fatalf("%v: err %v, want a usage error naming both flags", half, err)
		}
	}
	t.Setenv("DANMAKU_EDGE_TLS_CERT", "/run/cert.pem")
	t.Setenv("DANMAKU_EDGE_TLS_KEY", "/run/key.pem")
	if cfg, err := parse(); err != nil || cfg.EdgeTLSCert != "/run/cert.pem" || cfg.EdgeTLSKey != "/run/key.pem" {
		t.Fatalf("from the environment: cert %q key %q err %v", cfg.EdgeTLSCert, cfg.EdgeTLSKey, err)
	}
}

// TestServeEdgeTLS: `danmaku edge` with a certificate says it listens on
// wss://; with one that does not load it stops at start, naming the file,
// with a plain error (not a usage error: the flags were well formed).
func TestServeEdgeTLS(t *testing.T) {
	t.Setenv("DANMAKU_EDGE_TLS_CERT", "")
	t.Setenv("DANMAKU_EDGE_TLS_KEY", "")
	t.Setenv("DANMAKU_EDGE_URL", "")
	t.Setenv("DANMAKU_REDIS", "")
	// The edge verifies tokens: with no Redis it runs its own auth center.
	t.Setenv("DANMAKU_MASTER_KEY", strings.Repeat("ab", 32))
	dir := t.TempDir()
	c := tlsxtest.Write(t, dir, "edge")
	edge := roleCmd(stack.RoleEdge)
	args := func(cert, key string) []string {
		return []string{"-edge", "127.0.0.1:0", "-audit-dir", t.TempDir(), "-log-level", "error", "-edge-tls-cert", cert, "-edge-tls-key", key}
	}

	missing := filepath.Join(dir, "missing.pem")
	var out, errOut testenv.SyncBuffer
	err := edge(context.Background(), args(missing, c.KeyFile), &out, &errOut)
	var ue usageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing certificate: err %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- edge(ctx, args(c.CertFile, c.KeyFile), &out, &errOut) }()
	deadline := time.Now().Add(20 * time.Second) // a guard, not a speed requirement
	for !strings.Contains(out.String(), "press Ctrl-C") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("edge did not start; stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("edge: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "listening on wss://127.0.0.1:") {
		t.Fatalf("stdout:\n%s", out.String())
	}
}
