package testenv

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// Server is a running test server that a fault test can stop and start
// again on the same port with the same data, as an outage does.
type Server struct {
	t     testing.TB
	name  string
	bin   string
	args  []string
	dir   string
	ready func() error

	mu sync.Mutex
	p  *process
}

// Stop stops the server (SIGTERM, then SIGKILL). Stopping a stopped server
// does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.stop()
		s.p = nil
	}
}

// Start starts a stopped server again on its port and waits until it is
// ready. The port was the server's a moment ago; if something else took it,
// the test fails.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return
	}
	p, err := startProcess(s.name, s.bin, s.args, s.dir)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := p.waitReady(s.ready); err != nil {
		p.stop()
		s.t.Fatalf("testenv: restart %s: %v\nlog:\n%s", s.name, err, p.logTail())
	}
	s.p = p
}

// S3Restartable is S3, plus a handle that stops and restarts the server (same
// port, same data directory) for outage tests.
func S3Restartable(t testing.TB) (S3Env, *Server) {
	t.Helper()
	bin := versitygwBinary.require(t)
	dir := t.TempDir()
	port := FreePort(t)
	args, err := versitygwArgs("127.0.0.1:"+strconv.Itoa(port), s3AccessKey, s3SecretKey, S3Region, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	srv := &Server{t: t, name: "versitygw", bin: bin, args: args, dir: dir,
		ready: func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d%s", port, s3HealthPath)) }}
	srv.Start()
	t.Cleanup(srv.Stop)
	env := S3Env{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Region: S3Region, AccessKey: s3AccessKey, SecretKey: s3SecretKey, Bucket: S3Bucket}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := SetupBucket(ctx, env); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return env, srv
}
