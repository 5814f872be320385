package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"danmaku/internal/stack"
)

// settingCommands are the commands whose flags read the environment: every
// role, dev, and the audit reader (the other operator tools take flags
// only). flags builds a command's flag set as the command does; args are a
// start that is good but for the setting under test.
var settingCommands = []struct {
	name  string
	flags func() *flag.FlagSet
	args  func(t *testing.T) []string
}{
	{"dev", devFlagSet, roleArgs},
	{"gslb", serveFlagSet, roleArgs},
	{"ingest", serveFlagSet, roleArgs},
	{"edge", serveFlagSet, roleArgs},
	{"slicer", serveFlagSet, roleArgs},
	{"origin", serveFlagSet, roleArgs},
	{"audit", func() *flag.FlagSet {
		fs := newFlags("audit", io.Discard)
		var a auditArgs
		a.register(fs)
		return fs
	}, func(t *testing.T) []string { return []string{"-room", "r", "-audit-dir", t.TempDir()} }},
}

func serveFlagSet() *flag.FlagSet {
	fs := newFlags("serve", io.Discard)
	var f serveFlags
	f.register(fs)
	return fs
}

func devFlagSet() *flag.FlagSet {
	fs := newFlags("dev", io.Discard)
	var f serveFlags
	f.registerDev(fs)
	return fs
}

// roleArgs: every listener on a free port (a role that did start would
// collide with nothing) and an audit directory on a disk.
func roleArgs(t *testing.T) []string {
	return []string{"-gslb", "127.0.0.1:0", "-ingest", "127.0.0.1:0", "-edge", "127.0.0.1:0", "-origin", "127.0.0.1:0", "-slicer", "127.0.0.1:0",
		"-metrics-addr", "127.0.0.1:0", "-audit-dir", diskDir(t)}
}

// freeText are the flags whose every text is valid as far as parsing goes:
// addresses, URLs, paths and names, checked where they are used (a listen
// address when the role listens, a file when it is read). Every other flag
// of a command above must be a strict setting (settings.go). A name listed
// here that a command does not have is no error: -ingest-tls-cert and
// -ingest-tls-key are the ingest's files, as the edge's.
var freeText = map[string]bool{
	"gslb": true, "ingest": true, "edge": true, "origin": true, "slicer": true,
	"cdn": true, "data": true, "ingest-url": true, "edge-url": true, "node-id": true,
	"redis": true, "redis-user": true,
	"s3-bucket": true, "s3-endpoint": true, "s3-region": true, "s3-prefix": true,
	"rules-s3-bucket": true, "rules-s3-prefix": true, "rules-dir": true,
	"audit-dir": true, "audit-s3-bucket": true, "audit-s3-prefix": true,
	"edge-tls-cert": true, "edge-tls-key": true, "ingest-tls-cert": true, "ingest-tls-key": true,
	"line": true, "region": true, "lines-mmdb": true, "lines-cidr": true,
	"rate-limits": true, "words": true,
	// danmaku audit's own, checked with their own messages.
	"room": true, "since": true, "until": true, "user": true,
}

// clearDanmakuEnv unsets (as the rule reads it: empty) every DANMAKU_
// variable of the test's environment, so that only the case's own counts.
func clearDanmakuEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "DANMAKU_") {
			t.Setenv(k, "")
		}
	}
}

// TestEverySettingFailsLoudly is issue 17's table over every setting of
// every command that reads the environment: each value its rule refuses,
// given in its environment variable and as its flag, stops the command
// with a usage error that names the flag, the variable and the value. The
// table is the commands' own flag sets, so a setting added later has its
// cases (from its kind and range) and a flag that is neither a setting nor
// free text fails here.
func TestEverySettingFailsLoudly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a command that did start stops at once
	cases := 0
	for _, c := range settingCommands {
		t.Run(c.name, func(t *testing.T) {
			clearDanmakuEnv(t)
			run := commands[c.name].run
			c.flags().VisitAll(func(fl *flag.Flag) {
				s, ok := fl.Value.(*setting)
				if !ok {
					if fmt.Sprintf("%T", fl.Value) != "*flag.stringValue" || !freeText[fl.Name] {
						t.Errorf("-%s is a %T: make it a strict setting (settings.go), or list it in freeText if any text is valid", fl.Name, fl.Value)
					}
					return
				}
				if len(s.bad) == 0 {
					t.Errorf("-%s has no value its rule refuses", fl.Name)
				}
				for _, bad := range s.bad {
					check := func(how string, err error) {
						t.Helper()
						cases++
						var ue usageError
						if !errors.As(err, &ue) {
							t.Errorf("-%s %s %q: err %v, want a usage error", fl.Name, how, bad, err)
							return
						}
						want := []string{"-" + fl.Name, strconv.Quote(bad)}
						if s.env != "" {
							want = append(want, s.env)
						}
						if s.gone != "" {
							want = append(want, "-max-conns")
						}
						for _, w := range want {
							if !strings.Contains(err.Error(), w) {
								t.Errorf("-%s %s %q: %q does not name %s", fl.Name, how, bad, err, w)
							}
						}
					}
					check("flag", run(ctx, append(c.args(t), "-"+fl.Name+"="+bad), io.Discard, io.Discard))
					if s.env != "" {
						t.Setenv(s.env, bad)
						check("env", run(ctx, c.args(t), io.Discard, io.Discard))
						t.Setenv(s.env, "")
					}
				}
			})
		})
	}
	t.Logf("%d bad values refused, each naming its setting", cases)
}

// TestSettingForms: what the rule accepts, from the flag and the
// environment alike, and how the two meet.
func TestSettingForms(t *testing.T) {
	clearDanmakuEnv(t)
	for _, c := range []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(stack.Config, stack.BackendConfig) bool
		wantErr string
	}{
		{name: "count", env: map[string]string{"DANMAKU_MAX_CONNS": "100000"},
			check: func(c stack.Config, _ stack.BackendConfig) bool { return c.EdgeCapacity == 100000 }},
		{name: "count as a flag", args: []string{"-max-conns", "100000", "-gift-wait-replicas", "5"},
			check: func(c stack.Config, b stack.BackendConfig) bool {
				return c.EdgeCapacity == 100000 && b.GiftWaitReplicas == 5
			}},
		{name: "boolean yes", env: map[string]string{"DANMAKU_REDIS_CLUSTER": "yes", "DANMAKU_S3_PATH_STYLE": "YES"},
			check: func(_ stack.Config, b stack.BackendConfig) bool { return b.Redis.Cluster && b.S3.PathStyle }},
		{name: "boolean 1 and true", env: map[string]string{"DANMAKU_REDIS_CLUSTER": "1", "DANMAKU_S3_PATH_STYLE": "True"},
			check: func(_ stack.Config, b stack.BackendConfig) bool { return b.Redis.Cluster && b.S3.PathStyle }},
		{name: "boolean no, 0, false", env: map[string]string{"DANMAKU_REDIS_CLUSTER": "no", "DANMAKU_S3_PATH_STYLE": "0"}, args: []string{"-log-json=false"},
			check: func(_ stack.Config, b stack.BackendConfig) bool { return !b.Redis.Cluster && !b.S3.PathStyle }},
		{name: "boolean flag alone", args: []string{"-redis-cluster", "-s3-path-style"},
			check: func(_ stack.Config, b stack.BackendConfig) bool { return b.Redis.Cluster && b.S3.PathStyle }},
		{name: "duration", env: map[string]string{"DANMAKU_AUDIT_RETENTION": "720h", "DANMAKU_EDGE_DRAIN": "1m30s"},
			check: func(c stack.Config, _ stack.BackendConfig) bool {
				return c.AuditRetention == 720*time.Hour && c.EdgeDrain == 90*time.Second
			}},
		{name: "number", env: map[string]string{"DANMAKU_EDGE_CONNECT_RATE": "2.5", "DANMAKU_EDGE_MAX_HELLO_WAITS": "500"}, args: []string{"-edge-max-user-conns", "-1", "-edge-max-addr-hello-waits", "-1"},
			check: func(c stack.Config, _ stack.BackendConfig) bool {
				return c.EdgeConnectRate == 2.5 && c.EdgeMaxUserConns == -1 && c.EdgeMaxHelloWaits == 500 && c.EdgeMaxAddrHelloWaits == -1
			}},
		{name: "enumeration and lists", env: map[string]string{"DANMAKU_WORD_POLICY": "refuse", "DANMAKU_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7", "DANMAKU_LINES_REGIONS": "cn-sh=cn-east"},
			args: []string{"-segment-ms", "250"},
			check: func(c stack.Config, _ stack.BackendConfig) bool {
				return c.WordPolicy == "refuse" && len(c.TrustedProxies) == 2 && c.TrustedProxies[1] == "192.0.2.7" &&
					c.Lines.Regions["cn-sh"] == "cn-east" && c.SegmentMs == 250
			}},
		{name: "an empty variable is unset", env: map[string]string{"DANMAKU_MAX_CONNS": "", "DANMAKU_WORD_POLICY": "", "DANMAKU_AUDIT_RETENTION": ""},
			check: func(c stack.Config, _ stack.BackendConfig) bool {
				return c.EdgeCapacity == 0 && c.WordPolicy == "mask" && c.AuditRetention == 0 && c.SegmentMs == 1000
			}},
		{name: "the flag wins over the variable", env: map[string]string{"DANMAKU_MAX_CONNS": "100"}, args: []string{"-max-conns", "200"},
			check: func(c stack.Config, _ stack.BackendConfig) bool { return c.EdgeCapacity == 200 }},
		{name: "a bad variable stops even under a good flag", env: map[string]string{"DANMAKU_MAX_CONNS": "100k"}, args: []string{"-max-conns", "200"},
			wantErr: `DANMAKU_MAX_CONNS="100k"`},
		{name: "every bad variable at once", env: map[string]string{"DANMAKU_MAX_CONNS": "1m", "DANMAKU_AUDIT_RETENTION": "30d", "DANMAKU_S3_PATH_STYLE": "on"},
			wantErr: `DANMAKU_MAX_CONNS="1m"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg, b, err := parseServe(t, "edge", c.args...)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(cfg, b) {
				t.Fatalf("config %+v, backends %+v", cfg, b)
			}
		})
	}
	// The messages say the form and how to write what was meant.
	t.Setenv("DANMAKU_MAX_CONNS", "1m")
	t.Setenv("DANMAKU_AUDIT_RETENTION", "30d")
	t.Setenv("DANMAKU_S3_PATH_STYLE", "on")
	_, _, err := parseServe(t, "edge")
	for _, w := range []string{"no k, m or g suffix", "write 720h", "true, false, 1, 0, yes or no", "DANMAKU_S3_PATH_STYLE"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err %v does not say %q", err, w)
		}
	}
}

// TestEdgeCapacityRemoved: the edge has one capacity setting, -max-conns;
// the old name, as a flag or a variable, stops every role naming it.
func TestEdgeCapacityRemoved(t *testing.T) {
	clearDanmakuEnv(t)
	cfg, _, err := parseServe(t, "edge", "-max-conns", "50000")
	if err != nil || cfg.EdgeCapacity != 50000 {
		t.Fatalf("-max-conns 50000: capacity %d, err %v", cfg.EdgeCapacity, err)
	}
	for _, role := range []string{"edge", "gslb"} {
		if _, _, err := parseServe(t, role, "-edge-capacity", "50000"); err == nil || !strings.Contains(err.Error(), "-max-conns") {
			t.Errorf("%s -edge-capacity: err %v, want one naming -max-conns", role, err)
		}
		t.Setenv("DANMAKU_EDGE_CAPACITY", "50000")
		if _, _, err := parseServe(t, role, "-max-conns", "50000"); err == nil || !strings.Contains(err.Error(), "-max-conns") {
			t.Errorf("%s with DANMAKU_EDGE_CAPACITY: err %v, want one naming -max-conns", role, err)
		}
		t.Setenv("DANMAKU_EDGE_CAPACITY", "")
	}
}

// diskDir is a directory for a test on a file system that keeps its files
// (what checkAudit takes): t.TempDir, unless that is in memory, then one in
// the package's directory.
func diskDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if fs, err := memoryFS(d); err == nil && fs == "" {
		return d
	}
	d, err := os.MkdirTemp(".", "test-disk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	abs, err := filepath.Abs(d)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// memoryDir is a new directory on tmpfs, where the machine has one the
// test may write to (/dev/shm on Linux); "" where it has none.
func memoryDir(t *testing.T) string {
	t.Helper()
	for _, base := range []string{"/dev/shm", os.Getenv("XDG_RUNTIME_DIR")} {
		if base == "" {
			continue
		}
		if fs, err := memoryFS(base); err != nil || fs == "" {
			continue
		}
		d, err := os.MkdirTemp(base, "danmaku-audit-test-")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return ""
}

// TestServeAuditDestination is issue 17's durable audit: outside dev,
// ingest and slicer start only with an audit bucket or a directory given
// explicitly, never one in memory; the other roles keep no trail and need
// neither; dev keeps its default directory.
func TestServeAuditDestination(t *testing.T) {
	clearDanmakuEnv(t)
	disk := diskDir(t)
	mem := memoryDir(t)
	const (
		nowhere = "has nowhere durable"
		inMem   = "is on tmpfs, in memory"
	)
	for _, c := range []struct {
		name     string
		role     string
		env      map[string]string
		args     []string
		memory   bool // needs a tmpfs directory
		wantErr  string
		wantDir  string
		wantBkt  string
		wantName []string // what the error names besides wantErr
	}{
		{name: "ingest without", role: "ingest", wantErr: nowhere, wantName: []string{"-audit-s3-bucket", "DANMAKU_AUDIT_S3_BUCKET", "-audit-dir", "DANMAKU_AUDIT_DIR"}},
		{name: "slicer without", role: "slicer", wantErr: nowhere},
		{name: "ingest with a bucket", role: "ingest", args: []string{"-audit-s3-bucket", "trail"}, wantBkt: "trail"},
		{name: "slicer with a bucket from the environment", role: "slicer", env: map[string]string{"DANMAKU_AUDIT_S3_BUCKET": "trail"}, wantBkt: "trail"},
		{name: "ingest with a directory on a disk", role: "ingest", args: []string{"-audit-dir", disk}, wantDir: disk},
		{name: "slicer with a directory from the environment", role: "slicer", env: map[string]string{"DANMAKU_AUDIT_DIR": disk}, wantDir: disk},
		{name: "ingest with a directory on tmpfs", role: "ingest", memory: true, args: []string{"-audit-dir", mem}, wantErr: inMem},
		{name: "slicer with a directory on tmpfs not made yet", role: "slicer", memory: true, env: map[string]string{"DANMAKU_AUDIT_DIR": filepath.Join(mem, "not", "yet")}, wantErr: inMem, wantName: []string{"DANMAKU_AUDIT_DIR"}},
		{name: "a bucket wins over a tmpfs directory", role: "ingest", memory: true, args: []string{"-audit-dir", mem, "-audit-s3-bucket", "trail"}, wantBkt: "trail"},
		{name: "edge keeps no trail", role: "edge"},
		{name: "gslb keeps no trail", role: "gslb"},
		{name: "origin keeps no trail", role: "origin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.memory && mem == "" {
				t.Skip("no tmpfs directory on this machine to write to")
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := c.args
			if c.role == "ingest" || c.role == "edge" {
				// Their required metrics listener (TestMetricsAddrRequired).
				args = append([]string{"-metrics-addr", "127.0.0.1:0"}, args...)
			}
			cfg, b, err := parseServeArgs(c.role, args...)
			if c.wantErr != "" {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want a usage error saying %q", err, c.wantErr)
				}
				for _, w := range c.wantName {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not name %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.AuditS3.Bucket != c.wantBkt || (c.wantBkt == "" && cfg.AuditDir != c.wantDir) {
				t.Fatalf("audit dir %q bucket %q", cfg.AuditDir, b.AuditS3.Bucket)
			}
		})
	}
	t.Run("dev keeps its default", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{nil, DefaultAuditDir()},
			{[]string{"-audit-dir", mem}, mem}, // dev is exempt: nothing there is kept anyway
		} {
			if c.want == "" {
				continue // no tmpfs directory
			}
			var f serveFlags
			fs := newFlags("dev", io.Discard)
			f.register(fs)
			if err := parse(fs, c.args); err != nil {
				t.Fatal(err)
			}
			f.setDev()
			cfg, _, err := f.stackConfig(stack.AllRoles)
			if err != nil || cfg.AuditDir != c.want {
				t.Fatalf("%v: audit dir %q, err %v; want %q", c.args, cfg.AuditDir, err, c.want)
			}
		}
	})
}

// TestOperationsDocListsEverySetting keeps docs/operations.md's settings
// table true to the roles' flags (and dev's): every flag, and every setting's
// environment variable, is named there.
func TestOperationsDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	envInUsage := regexp.MustCompile(`\[(DANMAKU_[A-Z0-9_]+)\]`)
	devFlagSet().VisitAll(func(fl *flag.Flag) {
		names := []string{"`-" + fl.Name + "`"}
		if s, ok := fl.Value.(*setting); ok && s.env != "" {
			names = append(names, "`"+s.env+"`")
		} else if m := envInUsage.FindStringSubmatch(fl.Usage); m != nil {
			names = append(names, "`"+m[1]+"`")
		}
		for _, n := range names {
			if !strings.Contains(string(doc), n) {
				t.Errorf("docs/operations.md does not name %s", n)
			}
		}
	})
}

// TestMetricsAddrRequired: outside dev the edge and the ingest, whose ports
// are public, stop unless their /metrics has a listener of its own; the
// other roles may keep /metrics on their port.
func TestMetricsAddrRequired(t *testing.T) {
	clearDanmakuEnv(t)
	for _, c := range []struct {
		role    string
		args    []string
		wantErr bool
	}{
		{role: "edge", wantErr: true},
		{role: "ingest", wantErr: true},
		{role: "edge", args: []string{"-metrics-addr", "127.0.0.1:7712"}},
		{role: "ingest", args: []string{"-metrics-addr", ":7711"}},
		{role: "gslb"},
		{role: "slicer"},
	} {
		t.Run(c.role+strings.Join(c.args, " "), func(t *testing.T) {
			cfg, _, err := parseServeArgs(c.role, append([]string{"-audit-dir", diskDir(t)}, c.args...)...)
			if !c.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				if len(c.args) > 0 && cfg.MetricsAddr != c.args[1] {
					t.Errorf("MetricsAddr %q, want %q", cfg.MetricsAddr, c.args[1])
				}
				return
			}
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err %v, want a usage error", err)
			}
			for _, w := range []string{c.role, "-metrics-addr", "DANMAKU_METRICS_ADDR"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not name %s", err, w)
				}
			}
		})
	}
}

// TestServeTicketSettings: the ticket settings and the previous ticket key
// reach the stack.
func TestServeTicketSettings(t *testing.T) {
	clearDanmakuEnv(t)
	t.Setenv("DANMAKU_TICKET_KEY", "the-new-ticket-key-0123456789abcdef")
	t.Setenv("DANMAKU_TICKET_KEY_PREVIOUS", "the-old-ticket-key-0123456789abcdef")
	t.Setenv("DANMAKU_TICKET_AUDIENCE", "danmaku")
	cfg, _, err := parseServe(t, "gslb", "-ticket-max-lifetime", "2h", "-ticket-issuer", "https://login.example")
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.PreviousTicketKey) != "the-old-ticket-key-0123456789abcdef" || cfg.TicketMaxLifetime != 2*time.Hour ||
		cfg.TicketAudience != "danmaku" || cfg.TicketIssuer != "https://login.example" {
		t.Fatalf("config: previous key %q, lifetime %v, aud %q, iss %q", cfg.PreviousTicketKey, cfg.TicketMaxLifetime, cfg.TicketAudience, cfg.TicketIssuer)
	}
}
