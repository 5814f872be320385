package testenv

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis starts a redis-server for t on a free loopback port, without
// persistence, and returns its address ("127.0.0.1:PORT"). The server is
// stopped when t ends.
func Redis(t testing.TB) (addr string) {
	t.Helper()
	bin := redisBinary.require(t)
	port := serve(t, "redis", bin, t.TempDir(),
		func(port int, dir string) ([]string, error) {
			return []string{
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", dir,
				// Tests start from empty and throw the data away.
				"--save", "",
				"--appendonly", "no",
				"--daemonize", "no",
				"--logfile", "",
			}, nil
		},
		func(port int) error { return redisPing(fmt.Sprintf("127.0.0.1:%d", port)) })
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// redisPing sends PING in RESP and expects +PONG, so the probe needs no
// client library.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
