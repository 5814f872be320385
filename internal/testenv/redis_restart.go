package testenv

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
)

// RedisRestartable starts a redis-server for t, like Redis, but one that
// keeps its data across a restart as a managed Redis does: an append-only
// file fsynced on every write (--appendfsync always) in the server's own
// temporary directory, so that every write Redis acknowledged is on disk.
// srv stops it (Stop: SIGTERM, Redis flushes and exits; Kill: SIGKILL, a
// crash) and starts it again on the same port with the same directory; Start
// returns once the data is loaded and PING answers. The server is stopped
// when t ends, and its log is shown if t failed.
func RedisRestartable(t testing.TB) (addr string, srv *Server) {
	t.Helper()
	bin := redisBinary.require(t)
	dir := t.TempDir()
	port := FreePort(t)
	addr = "127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		// Durability comes from the AOF alone: every acknowledged write is
		// fsynced before its reply, and a restart replays it. No RDB
		// snapshots, which would only add a second, older copy.
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
		"--daemonize", "no",
		"--logfile", "",
	}
	srv = &Server{t: t, name: "redis", bin: bin, args: args, dir: dir,
		ready: func() error { return redisPing(addr) }}
	srv.Start()
	t.Cleanup(func() {
		if t.Failed() {
			srv.mu.Lock()
			if srv.p != nil {
				t.Logf("testenv: redis log (%s):\n%s", srv.p.logPath, srv.p.logTail())
			}
			srv.mu.Unlock()
		}
		srv.Stop()
	})
	return addr, srv
}

// Kill stops the server the hard way, as a crash of the process does:
// SIGKILL to its process group, without giving it a chance to flush or
// close connections. (What the server wrote to files survives in the page
// cache; a lost machine would also lose what was not fsynced.) Killing a
// stopped server does nothing. Start brings it back.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return
	}
	// ESRCH: it is gone already. Any other failure falls back to stop,
	// which cannot hang.
	if err := syscall.Kill(-s.p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.p.stop()
	}
	<-s.p.done
	s.p = nil
}
