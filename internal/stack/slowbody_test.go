package stack_test

import (
	"bufio"
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
	host := func(role string) string { return hostOf(t, st, role) }
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
			outcomes := flood(t, st, tc.req.role, n, func() (slowOutcome, error) { return sendSlow(addr, tc.req, limit) })
			for o, k := range outcomes {
				switch {
				case tc.want != (slowOutcome{}) && o != tc.want:
					t.Errorf("%d requests ended %+v, want %+v", k, o, tc.want)
				case !o.closed && o.code == "":
					t.Errorf("%d requests answered %d without a code", k, o.status)
				}
			}
		})
	}
}

// hostOf is the host:port a role listens on.
func hostOf(t *testing.T, st *stack.Stack, role string) string {
	t.Helper()
	u, err := url.Parse(st.URLs[role])
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// flood runs n copies of attack at once against role and returns how they
// ended, while checking that /healthz of the role under attack and of the
// edge is served throughout, on fresh connections, until every attack has
// ended. An attack's error fails t (the first five are reported).
func flood(t *testing.T, st *stack.Stack, role string, n int, attack func() (slowOutcome, error)) map[slowOutcome]int {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[slowOutcome]int{}
		failures []error
		done     atomic.Int64
	)
	for range n {
		wg.Go(func() {
			defer done.Add(1)
			o, err := attack()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err)
				return
			}
			outcomes[o]++
		})
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	probes := 0
	for done.Load() < int64(n) || probes < 3 {
		for _, r := range []string{role, stack.RoleEdge} {
			resp, err := client.Get("http://" + hostOf(t, st, r) + "/healthz")
			if err != nil {
				t.Errorf("%s /healthz during the flood: %v", r, err)
				continue
			}
			resp.Body.Close()
			if r != stack.RoleOrigin && resp.StatusCode != http.StatusOK {
				t.Errorf("%s /healthz during the flood: %d", r, resp.StatusCode)
			}
		}
		probes++
		if done.Load() >= int64(n) && probes >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond) // pacing the probes, not waiting for a result
	}
	wg.Wait()
	for _, err := range failures[:min(len(failures), 5)] {
		t.Error(err)
	}
	t.Logf("%d attacks on %s: %v; %d health probes served", n, role, outcomes, probes)
	return outcomes
}

// sendSlowHeader is a Slowloris client: it sends a request line and the
// start of a header, then drips one more byte of it every dripEvery,
// never ending the header, until the server answers or closes (or limit
// passes: an error). Dripping does not help it: ReadHeaderTimeout bounds
// the whole header, however it trickles in.
func sendSlowHeader(addr string, limit time.Duration) (slowOutcome, error) {
	const dripEvery = 250 * time.Millisecond
	nc, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return slowOutcome{}, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(limit))
	if _, err := fmt.Fprintf(nc, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr); err != nil {
		return slowOutcome{closed: true}, nil
	}
	ended := make(chan error, 1)
	var o slowOutcome
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err == nil {
			o.status = resp.StatusCode
			resp.Body.Close()
		}
		ended <- err
	}()
	drip := time.NewTicker(dripEvery) // pacing the attack
	defer drip.Stop()
	for {
		select {
		case err := <-ended:
			var ne net.Error
			switch {
			case err == nil:
				return o, nil
			case errors.As(err, &ne) && ne.Timeout():
				return slowOutcome{}, fmt.Errorf("a header still trickling in after %v", limit)
			}
			return slowOutcome{closed: true}, nil
		case <-drip.C:
			_, _ = nc.Write([]byte("a")) // a write after the close fails; the read says so
		}
	}
}

// TestSlowHeaders: on every listener, Slowloris clients (a header that
// trickles in and never ends) are closed without an answer at the header
// timeout, however they drip, while new viewers and /healthz are served
// throughout. The figure is how many such connections were held at once.
func TestSlowHeaders(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	// The header timeout is capped to the read timeout: 5 s, long enough
	// that the health probes' headers, written at once on a busy machine,
	// still arrive within it.
	const readTimeout = 5 * time.Second
	st := stacktest.Start(t, stack.Config{ReadTimeout: readTimeout})
	for _, role := range []string{stack.RoleGSLB, stack.RoleIngest, stack.RoleEdge, stack.RoleOrigin, stack.RoleSlicer} {
		t.Run(role, func(t *testing.T) {
			addr := hostOf(t, st, role)
			limit := readTimeout + 60*time.Second // turns a hang into a failure
			outcomes := flood(t, st, role, n, func() (slowOutcome, error) { return sendSlowHeader(addr, limit) })
			if want := (slowOutcome{closed: true}); outcomes[want] != n {
				t.Errorf("%v of %d slow headers, want all closed without an answer", outcomes, n)
			}
		})
	}
}
