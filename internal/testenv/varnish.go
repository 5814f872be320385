package testenv

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// vclTemplate is the project's CDN configuration, shared with
// infra/local/cdn.sh, relative to the repository root.
const vclTemplate = "infra/local/varnish.vcl"

// cdnHealthPath is answered by the VCL itself, without the backend, so
// readiness probes do not show up as origin requests.
const cdnHealthPath = "/_cdn/health"

// Varnish starts varnishd for t on a free loopback port as a CDN in front of
// backendURL, e.g. S3Env.BucketURL() ("http://127.0.0.1:PORT/bucket"): a GET
// of cdnURL+"/k" is fetched from backendURL+"/k" and cached per
// infra/local/varnish.vcl. It returns the CDN's base URL, without a trailing
// slash. Responses carry X-Cache: HIT or MISS. The server is stopped when t
// ends.
func Varnish(t testing.TB, backendURL string) (cdnURL string) {
	t.Helper()
	bin := varnishdBinary.require(t)
	vcl := varnishVCL(t, backendURL)
	listen := serve(t, "varnishd", bin, t.TempDir(),
		func(port int, dir string) ([]string, error) { return varnishArgs(vcl, port, dir) },
		func(port int) error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d%s", port, cdnHealthPath)) })
	return fmt.Sprintf("http://127.0.0.1:%d", listen)
}

// VarnishRestartable is Varnish, plus a handle that stops and starts it
// again on the same port (its cache emptied, as a restarted CDN node's
// is), for fault tests.
func VarnishRestartable(t testing.TB, backendURL string) (cdnURL string, srv *Server) {
	t.Helper()
	bin := varnishdBinary.require(t)
	vcl := varnishVCL(t, backendURL)
	dir := t.TempDir()
	port := FreePort(t)
	args, err := varnishArgs(vcl, port, dir)
	if err != nil {
		t.Fatalf("testenv: varnish: %v", err)
	}
	srv = &Server{t: t, name: "varnishd", bin: bin, args: args, dir: dir,
		ready: func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d%s", port, cdnHealthPath)) }}
	srv.Start()
	t.Cleanup(srv.Stop)
	return fmt.Sprintf("http://127.0.0.1:%d", port), srv
}

// varnishVCL renders infra/local/varnish.vcl for backendURL.
func varnishVCL(t testing.TB, backendURL string) string {
	t.Helper()
	host, port, prefix, err := splitBackend(backendURL)
	if err != nil {
		t.Fatalf("testenv: varnish backend: %v", err)
	}
	tmpl, err := findRepoFile(vclTemplate)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	src, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return strings.NewReplacer(
		"@BACKEND_HOST@", host,
		"@BACKEND_PORT@", port,
		"@BACKEND_PREFIX@", prefix,
	).Replace(string(src))
}

// varnishArgs writes vcl into dir and returns varnishd's arguments to
// listen on port.
func varnishArgs(vcl string, port int, dir string) ([]string, error) {
	vclPath := filepath.Join(dir, "varnish.vcl")
	if err := os.WriteFile(vclPath, []byte(vcl), 0o644); err != nil {
		return nil, err
	}
	return []string{
		"-F",         // foreground, so the test owns the process
		"-j", "none", // no privilege drop: the work dir is the test's
		"-T", "none", // no management listener to collide with
		"-n", filepath.Join(dir, "work"),
		"-a", "127.0.0.1:" + strconv.Itoa(port),
		"-f", vclPath,
		"-s", "malloc,64m",
		"-l", "16m", // shared-memory log; the 80M default is wasted here
	}, nil
}

func splitBackend(backendURL string) (host, port, prefix string, err error) {
	u, err := url.Parse(backendURL)
	if err != nil {
		return "", "", "", err
	}
	if u.Scheme != "http" {
		return "", "", "", fmt.Errorf("%q: only http backends are supported", backendURL)
	}
	host, port = u.Hostname(), u.Port()
	if host == "" {
		return "", "", "", fmt.Errorf("%q: no host", backendURL)
	}
	if port == "" {
		port = "80"
	}
	if ip := net.ParseIP(host); ip == nil && host != "localhost" {
		return "", "", "", fmt.Errorf("%q: host must be an IP address or localhost", backendURL)
	}
	if strings.ContainsAny(u.Path, `"\`) || u.RawQuery != "" {
		return "", "", "", fmt.Errorf("%q: path must be a plain prefix", backendURL)
	}
	return host, port, strings.TrimSuffix(u.Path, "/"), nil
}

// findRepoFile finds rel under the repository root: first walking up from the
// working directory (a test runs in its package directory), then from this
// source file.
func findRepoFile(rel string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, rel)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("%s not found above %s", rel, strings.Join(starts, " or "))
}
