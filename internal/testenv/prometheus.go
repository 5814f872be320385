package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var (
	promtoolBinary = binary{
		name:    "promtool",
		envVar:  "DANMAKU_PROMTOOL",
		extra:   []string{"/usr/bin", "/usr/local/bin"},
		install: "Debian package prometheus",
	}
	prometheusBinary = binary{
		name:    "prometheus",
		envVar:  "DANMAKU_PROMETHEUS",
		extra:   []string{"/usr/bin", "/usr/local/bin"},
		install: "Debian package prometheus",
	}
)

// Promtool returns the path of promtool, which checks and unit-tests
// Prometheus rules, or skips or fails t when it is missing.
func Promtool(t testing.TB) string {
	t.Helper()
	return promtoolBinary.require(t)
}

// Prometheus starts a Prometheus server for t on a free loopback port with
// the configuration config (prometheus.yml text; paths in it must be
// absolute), its data in t's temporary directory, and returns its base URL
// ("http://127.0.0.1:PORT"). The server is stopped when t ends.
func Prometheus(t testing.TB, config string) (url string) {
	t.Helper()
	bin := prometheusBinary.require(t)
	port := serve(t, "prometheus", bin, t.TempDir(),
		func(port int, dir string) ([]string, error) {
			cfg := filepath.Join(dir, "prometheus.yml")
			if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
				return nil, err
			}
			return []string{
				"--config.file=" + cfg,
				"--storage.tsdb.path=" + filepath.Join(dir, "data"),
				fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
				"--log.level=warn",
			}, nil
		},
		func(port int) error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/-/ready", port)) })
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}
