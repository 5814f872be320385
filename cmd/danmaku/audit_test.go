package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"danmaku/internal/audit"
	"danmaku/internal/objstore"
	"danmaku/internal/stack"
	"danmaku/internal/testenv"
)

// writeTrail records comments of the last minutes into store, as an
// ingest node would, and writes them out.
func writeTrail(t *testing.T, store objstore.Store) {
	t.Helper()
	r, err := audit.New(audit.Config{Store: store, Node: "ingest-1", SweepEvery: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, rec := range []audit.Record{
		{At: now.Add(-30 * time.Minute), Room: "demo", User: "old", Text: "too old", Decision: audit.Stored},
		{At: now.Add(-5 * time.Minute), Room: "demo", User: "alice", Text: "hello", Decision: audit.Stored},
		{At: now.Add(-4 * time.Minute), Room: "demo", User: "bob", Text: "buy \"cheap\"", Decision: audit.Dropped, Reason: "duplicate"},
		{At: now.Add(-3 * time.Minute), Room: "demo", User: "alice", Text: "bad word", Shown: "*** word", Decision: audit.Masked, Reason: "sensitive_word"},
		{At: now.Add(-2 * time.Minute), Room: "other", User: "carol", Text: "elsewhere", Decision: audit.Stored},
	} {
		r.Record(rec)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func runAuditCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runAudit(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestAuditCommandDir(t *testing.T) {
	dir := t.TempDir()
	store, err := objstore.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeTrail(t, store)

	out, errOut, err := runAuditCmd(t, "-audit-dir", dir, "-room", "demo", "-since", "10m")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out)
	}
	for i, want := range []string{
		`  alice  stored  "hello"`,
		`  bob  dropped/duplicate  "buy \"cheap\""`,
		`  alice  masked/sensitive_word  "bad word"  shown "*** word"`,
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d = %q, want it to end with %q", i, lines[i], want)
		}
	}
	if !strings.Contains(errOut, "3 records of room demo") {
		t.Errorf("summary: %q", errOut)
	}

	out, _, err = runAuditCmd(t, "-audit-dir", dir, "-room", "demo", "-since", "10m", "-user", "alice", "-json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	n := 0
	for dec.More() {
		var r struct {
			Time, User, Decision string
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.User != "alice" || r.Time == "" {
			t.Fatalf("record %+v", r)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("-user alice: %d records, want 2", n)
	}

	out, _, err = runAuditCmd(t, "-audit-dir", dir, "-room", "demo", "-since", "1h", "-until", "20m")
	if err != nil || !strings.Contains(out, "too old") || strings.Count(out, "\n") != 1 {
		t.Fatalf("-since 1h -until 20m: %v\n%s", err, out)
	}
}

func TestAuditCommandS3(t *testing.T) {
	env := testenv.S3(t)
	s3cfg := objstore.S3Config{Bucket: env.Bucket, Prefix: "audit-test/", Endpoint: env.Endpoint, Region: env.Region,
		PathStyle: true, AccessKey: env.AccessKey, SecretKey: env.SecretKey}
	store, err := objstore.NewS3Store(context.Background(), s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeTrail(t, store)
	t.Setenv("DANMAKU_S3_ACCESS_KEY", env.AccessKey)
	t.Setenv("DANMAKU_S3_SECRET_KEY", env.SecretKey)
	out, errOut, err := runAuditCmd(t, "-audit-s3-bucket", env.Bucket, "-audit-s3-prefix", "audit-test/",
		"-s3-endpoint", env.Endpoint, "-s3-region", env.Region, "-s3-path-style", "-room", "demo", "-user", "bob")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "dropped/duplicate") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestAuditCommandErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		args  []string
		usage bool
	}{
		{"no room", []string{"-audit-dir", dir}, true},
		{"bad room", []string{"-audit-dir", dir, "-room", "../x"}, true},
		{"bad since", []string{"-audit-dir", dir, "-room", "r", "-since", "yesterday"}, true},
		{"negative since", []string{"-audit-dir", dir, "-room", "r", "-since", "-5m"}, true},
		{"until before since", []string{"-audit-dir", dir, "-room", "r", "-since", "5m", "-until", "10m"}, true},
		{"stray argument", []string{"-audit-dir", dir, "-room", "r", "extra"}, true},
		{"bad s3 prefix", []string{"-audit-s3-bucket", "b", "-audit-s3-prefix", "no-slash", "-room", "r"}, true},
		{"missing directory", []string{"-audit-dir", dir + "/nope", "-room", "r"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runAuditCmd(t, c.args...)
			var ue usageError
			if err == nil || errors.As(err, &ue) != c.usage {
				t.Fatalf("err %v (usage error: %v), want a usage error: %v", err, errors.As(err, &ue), c.usage)
			}
		})
	}
	// An empty trail is no error: nothing was said in the room.
	if out, _, err := runAuditCmd(t, "-audit-dir", dir, "-room", "quiet"); err != nil || out != "" {
		t.Fatalf("empty trail: %q, %v", out, err)
	}
}

// TestServeAuditFlags: a role cannot run without somewhere to keep the
// audit trail, and its retention and prefix reach the stack.
func TestServeAuditFlags(t *testing.T) {
	parse := func(args ...string) (stack.Config, stack.BackendConfig, error) {
		t.Helper()
		return parseServe(t, "ingest", args...)
	}
	if _, _, err := parse("-audit-dir", ""); err == nil || !strings.Contains(err.Error(), "-audit-s3-bucket") {
		t.Fatalf("no audit store: err = %v", err)
	}
	if _, _, err := parse("-audit-retention", "10m"); err == nil || !strings.Contains(err.Error(), "-audit-retention") {
		t.Fatalf("10m retention: err = %v", err)
	}
	cfg, b, err := parse("-audit-dir", "", "-audit-s3-bucket", "trail", "-audit-s3-prefix", "p/", "-audit-retention", "168h")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuditRetention != 168*time.Hour || b.AuditS3.Bucket != "trail" || b.AuditS3.Prefix != "p/" {
		t.Fatalf("retention %v, audit S3 %+v", cfg.AuditRetention, b.AuditS3)
	}
}

// TestServeGSLBFlags: the gslb's and nodes' new flags reach the stack, and
// bad values stop the role with a usage error.
func TestServeGSLBFlags(t *testing.T) {
	parse := func(args ...string) (stack.Config, error) {
		t.Helper()
		cfg, _, err := parseServe(t, "gslb", args...)
		return cfg, err
	}
	cfg, err := parse("-trusted-proxies", "10.0.0.0/8, 192.0.2.7", "-lines-cidr", "/x/lines.txt", "-lines-isp", "as4134=telecom",
		"-max-conns", "50000", "-line", "telecom", "-gslb-max-inflight", "256", "-gslb-max-table-age", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.TrustedProxies) != 2 || cfg.Lines.CIDR != "/x/lines.txt" || cfg.Lines.ISPLines["as4134"] != "telecom" ||
		cfg.EdgeCapacity != 50000 || cfg.Line != "telecom" || cfg.GSLBMaxInFlight != 256 || cfg.GSLBMaxTableAge != 5*time.Second {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range [][]string{
		{"-trusted-proxies", "10.0.0.0/8,not-an-ip"},
		{"-lines-isp", "as4134"},
		{"-max-conns", "-1"},
		{"-edge-capacity", "50000"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// parseServe parses a role's serve flags from args and returns its stack
// configuration, as the role would start with, given an audit directory of
// its own on the test's disk (args may override it).
func parseServe(t *testing.T, role string, args ...string) (stack.Config, stack.BackendConfig, error) {
	t.Helper()
	return parseServeArgs(role, append([]string{"-audit-dir", diskDir(t), "-metrics-addr", "127.0.0.1:0"}, args...)...)
}

// parseServeArgs is parseServe with args alone: a flag's bad value is the
// error, as for the role.
func parseServeArgs(role string, args ...string) (stack.Config, stack.BackendConfig, error) {
	var f serveFlags
	fs := newFlags(role, io.Discard)
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return stack.Config{}, stack.BackendConfig{}, err
	}
	return f.stackConfig([]string{role})
}
