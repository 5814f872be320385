package stack_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

// slowRequest is a request whose header arrives whole and whose body never
// does: it declares more than it sends.
type slowRequest struct {
	role, method, path string
	header             string
}

func (r slowRequest) bytes(host string) []byte {
	return []byte(fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":", r.method, r.path, host, r.header))
}

// slowOutcome is how a slow request ended: with a coded answer (its status
// and code) or closed without one.
type slowOutcome struct {
	status int
	code   string
	closed bool
}

// sendSlow writes r and waits for its end: an answer, or the socket closed.
// limit only turns a hang into a failure; the server's own bound is what
// ends the request.
func sendSlow(addr string, r slowRequest, limit time.Duration) (slowOutcome, error) {
	nc, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return slowOutcome{}, err
	}
	defer nc.Close()
	if _, err := nc.Write(r.bytes(addr)); err != nil {
		return slowOutcome{closed: true}, nil
	}
	_ = nc.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return slowOutcome{}, fmt.Errorf("%s %s still open after %v", r.method, r.path, limit)
		}
		return slowOutcome{closed: true}, nil // EOF or reset: closed without an answer
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	code := ""
	if i := strings.Index(string(body), `"code":"`); i >= 0 {
		code, _, _ = strings.Cut(string(body[i+len(`"code":"`):]), `"`)
	}
	return slowOutcome{status: resp.StatusCode, code: code}, nil
}

// TestSlowBodies: on every listener, requests whose body never arrives are
// ended with a coded answer — the edge and the origin at once, since none
// of their routes takes a body, the other roles 408 body_timeout at the
// configured read timeout — while new viewers and /healthz are served
// throughout.
func TestSlowBodies(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	// Long enough that a header written a moment after the dial, on a
	// machine busy with a thousand clients, still arrives within it
	// (the header timeout is capped to it): the slow part is the body.
	const readTimeout = 5 * time.Second
	st := stacktest.Start(t, stack.Config{ReadTimeout: readTimeout, MetricsAddr: "127.0.0.1:0"})
	host := func(role string) string {
		u, err := url.Parse(st.URLs[role])
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	// The edge refuses a declared body, on every path, before any route
	// runs: the WebSocket handshake included.
	wsHeader := "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	for _, tc := range []struct {
		req slowRequest
		// want is the answer; zero: closed, or any coded answer.
		want slowOutcome
	}{
		{slowRequest{role: stack.RoleEdge, method: "GET", path: "/v1/ws", header: wsHeader}, slowOutcome{status: 400, code: "body_not_allowed"}},
		{slowRequest{role: stack.RoleEdge, method: "GET", path: "/healthz"}, slowOutcome{status: 400, code: "body_not_allowed"}},
		{slowRequest{role: stack.RoleEdge, method: "POST", path: "/nosuch"}, slowOutcome{status: 400, code: "body_not_allowed"}},
		// The origin takes no body either.
		{slowRequest{role: stack.RoleOrigin, method: "GET", path: "/rooms/demo/live.json"}, slowOutcome{status: 400, code: "body_not_allowed"}},
		// The metrics listener serves scrapes (GET) only.
		{slowRequest{role: stack.MetricsListener, method: "GET", path: "/metrics"}, slowOutcome{status: 400, code: "body_not_allowed"}},
		// The roles whose routes read bodies answer at the read timeout.
		{slowRequest{role: stack.RoleGSLB, method: "POST", path: "/v1/admin/events", header: "Authorization: Bearer " + stack.DevServiceKey + "\r\n"}, slowOutcome{status: 408, code: "body_timeout"}},
		{slowRequest{role: stack.RoleIngest, method: "POST", path: "/v1/gifts", header: "Authorization: Bearer " + stack.DevServiceKey + "\r\n"}, slowOutcome{status: 408, code: "body_timeout"}},
		{slowRequest{role: stack.RoleSlicer, method: "PUT", path: "/v1/admin/budget", header: "Authorization: Bearer " + stack.DevServiceKey + "\r\n"}, slowOutcome{status: 408, code: "body_timeout"}},
	} {
		t.Run(tc.req.role+" "+tc.req.method+" "+tc.req.path, func(t *testing.T) {
			addr := host(tc.req.role)
			// Generous: a loaded -race run is slow, and the point is that
			// the server ends each request, not how fast.
			limit := readTimeout + 60*time.Second
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				outcomes = map[slowOutcome]int{}
				failures []error
				done     atomic.Int64
			)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer done.Add(1)
					o, err := sendSlow(addr, tc.req, limit)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failures = append(failures, err)
						return
					}
					outcomes[o]++
				}()
			}
			// Served throughout: /healthz of the role under attack and of
			// the edge, on fresh connections, until every slow request has
			// ended.
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			probes := 0
			for done.Load() < int64(n) || probes < 3 {
				for _, role := range []string{tc.req.role, stack.RoleEdge} {
					resp, err := client.Get("http://" + host(role) + "/healthz")
					if err != nil {
						t.Errorf("%s /healthz during the flood: %v", role, err)
						continue
					}
					resp.Body.Close()
					if role != stack.RoleOrigin && resp.StatusCode != http.StatusOK {
						t.Errorf("%s /healthz during the flood: %d", role, resp.StatusCode)
					}
				}
				probes++
				if done.Load() >= int64(n) && probes >= 3 {
					break
				}
				select {
				case <-time.After(20 * time.Millisecond):
				case <-context.Background().Done():
				}
			}
			wg.Wait()
			for _, err := range failures[:min(len(failures), 5)] {
				t.Error(err)
			}
			for o, k := range outcomes {
				switch {
				case tc.want != (slowOutcome{}) && o != tc.want:
					t.Errorf("%d requests ended %+v, want %+v", k, o, tc.want)
				case !o.closed && o.code == "":
					t.Errorf("%d requests answered %d without a code", k, o.status)
				}
			}
			t.Logf("%d slow requests: %v; %d health probes served", n, outcomes, probes)
		})
	}
}
