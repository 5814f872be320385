package httpx

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
)

// serveBodies serves a route that binds a JSON body of at most limit bytes
// on a real listener, with the server's read and write timeouts, and
// returns its address.
func serveBodies(t *testing.T, limit int64, readTimeout, writeTimeout time.Duration) string {
	t.Helper()
	e := NewEngine(EngineConfig{Role: "r"})
	e.POST("/x", func(c *gin.Context) {
		var b body
		if err := BindJSON(c, limit, &b); err != nil {
			Abort(c, err)
			return
		}
		c.JSON(http.StatusOK, b)
	})
	srv := NewServer(e, writeTimeout)
	srv.ReadTimeout = readTimeout
	return startServer(t, srv)
}

// startServer serves srv on a random loopback port until the test ends,
// and returns its address.
func startServer(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// rawConn dials addr and bounds the whole exchange by a generous deadline:
// it turns a hang into a failure and measures nothing.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// closedAfter reports whether the server closed c after its answer.
func closedAfter(br *bufio.Reader) bool {
	_, err := br.ReadByte()
	return err == io.EOF
}

// TestBodyTimeout: a body that stops arriving is answered 408 body_timeout
// at the read timeout, and the connection closed — even when the server's
// write deadline, set when the header was read, passed before the read
// timeout did (the roles' 10 s write and 15 s read timeouts).
func TestBodyTimeout(t *testing.T) {
	addr := serveBodies(t, 1<<10, 300*time.Millisecond, 50*time.Millisecond)
	for _, tt := range []struct{ name, framing, sent string }{
		{"content-length", "Content-Length: 100\r\n", `{"text":`},
		{"chunked", "Transfer-Encoding: chunked\r\n", "8\r\n{\"text\":\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := rawConn(t, addr)
			fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n%s", tt.framing, tt.sent)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || errorCode(t, b) != CodeBodyTimeout {
				t.Fatalf("%d %s, want 408 %s", resp.StatusCode, b, CodeBodyTimeout)
			}
			if !resp.Close || !closedAfter(br) {
				t.Fatal("the connection stays open after the answer")
			}
		})
	}
}
