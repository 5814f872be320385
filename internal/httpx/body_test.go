package httpx

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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

// TestTooLargeBeforeContinue: a body declared over the limit, sent with
// Expect: 100-continue, is answered 413 body_too_large as the final answer
// to the header — no "100 Continue" first — and the connection closed, the
// body never read. Within the limit, the server says continue and reads it.
func TestTooLargeBeforeContinue(t *testing.T) {
	const limit = 100
	addr := serveBodies(t, limit, 10*time.Second, 10*time.Second)
	send := func(t *testing.T, c net.Conn, n int) *bufio.Reader {
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", n)
		return bufio.NewReader(c)
	}
	t.Run("over the limit", func(t *testing.T) {
		c := rawConn(t, addr)
		br := send(t, c, 1<<20)
		// The first answer the client sees must be the final one.
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, b) != CodeTooLarge {
			t.Fatalf("first answer %d %s, want 413 %s (no 100 Continue)", resp.StatusCode, b, CodeTooLarge)
		}
		if !closedAfter(br) {
			t.Fatal("the connection stays open after the 413")
		}
	})
	t.Run("within the limit", func(t *testing.T) {
		c := rawConn(t, addr)
		payload := `{"text":"hi","n":1}`
		br := send(t, c, len(payload))
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("interim answer %v %v, want 100 Continue", resp, err)
		}
		io.WriteString(c, payload)
		if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("final answer %v %v, want 200", resp, err)
		}
		resp.Body.Close()
	})
	// Without a declared length (chunked), the limit is met while reading.
	t.Run("chunked over the limit", func(t *testing.T) {
		c := rawConn(t, addr)
		big := `{"text":"` + strings.Repeat("x", 2*limit) + `"}`
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, b) != CodeTooLarge {
			t.Fatalf("%d %s, want 413 %s", resp.StatusCode, b, CodeTooLarge)
		}
	})
}
