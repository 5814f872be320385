package observability_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/loadtable"
	"danmaku/internal/objstore"
	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/slicer"
)

// promInterval is the scrape and evaluation interval of the test's
// Prometheus: short, so that the alert's own "for" dominates what is
// measured.
const promInterval = "500ms"

// waitLimit bounds each wait on Prometheus; reaching it is a failure (the
// condition never came), not a measurement.
const waitLimit = 2 * time.Minute

// prometheusConfig renders the local stack's prometheus.yml through
// infra/local/prometheus.sh, so the test runs the configuration `make
// local-up` runs: the job, the role labels, the repository's rule files.
func prometheusConfig(t *testing.T, targets map[string]string) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found: infra/local/prometheus.sh needs it")
	}
	var list []string
	for role, addr := range targets {
		list = append(list, role+"="+addr)
	}
	cmd := exec.Command(bash, "../local/prometheus.sh", "config")
	cmd.Env = append(os.Environ(),
		"DANMAKU_LOCAL_DIR="+t.TempDir(),
		"DANMAKU_PROMETHEUS_TARGETS="+strings.Join(list, ","),
		"DANMAKU_PROMETHEUS_INTERVAL="+promInterval)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("prometheus.sh config: %v\n%s", err, stderr)
	}
	return string(out)
}

// promAPI reads Prometheus's HTTP API.
type promAPI struct {
	base string
	hc   *http.Client
}

func (p promAPI) get(path string, q url.Values, into any) error {
	resp, err := p.hc.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

// alertState returns the state of the active alert named name ("pending",
// "firing"), or "" when it is not active.
func (p promAPI) alertState(name string) (string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		return "", err
	}
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State, nil
		}
	}
	return "", nil
}

// scalar evaluates a query that yields one sample; ok is false when it
// yields none.
func (p promAPI) scalar(query string) (v float64, ok bool, err error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {query}}, &data); err != nil {
		return 0, false, err
	}
	if len(data.Result) != 1 {
		return 0, false, nil
	}
	s, _ := data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	return v, err == nil, err
}

// await polls cond every 100 ms until it holds and returns when it first
// did; it fails t after waitLimit.
func await(t *testing.T, what string, cond func() (bool, error)) time.Time {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return time.Now()
		}
		if err != nil {
			last = err
		}
		select {
		case <-tick.C:
		case <-limit.C:
			t.Fatalf("%s: not within %v (last error: %v)", what, waitLimit, last)
		}
	}
}

// runningSlicer is a slicer process's worth of stack, stopped by stop.
type runningSlicer struct {
	stop func()
}

// startSlicer runs the slicer role alone on addr over the shared backends,
// as a separate slicer process would.
func startSlicer(t *testing.T, b stack.Backends, addr, node string, log *slog.Logger) runningSlicer {
	t.Helper()
	st, err := stack.New(stack.Config{Roles: []string{stack.RoleSlicer}, SlicerAddr: addr, Dev: true, NodeID: node, Backends: b, Logger: log})
	if err != nil {
		t.Fatalf("slicer %s on %s: %v", node, addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("slicer %s: %v", node, err)
		}
	}
	t.Cleanup(stop)
	return runningSlicer{stop: stop}
}

// TestLocalAlert runs the repository's rules in a real Prometheus (the
// configuration of infra/local/prometheus.sh, scrape and evaluation every
// 500 ms) against a running stack: the gslb, ingest, edge and origin in one
// process's worth of stack, the only slicer in another, sharing backends.
// It stops the slicer — a leader without a standby — and waits, through
// Prometheus's HTTP API, for DanmakuRoomWithoutLeader to fire; then starts
// a slicer again and waits for the alert to resolve. It logs the time from
// the fault to the alert firing and from the recovery to it resolving
// (docs/operations.md, "Local Prometheus").
func TestLocalAlert(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts Prometheus and waits for an alert's 10 s")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	master := make([]byte, 32)
	_, _ = rand.Read(master)
	b := stack.Backends{
		Shared: stack.SharedBackends{Streams: stream.NewMemoryStore(nil), Objects: objstore.NewMemoryStore(), Load: loadtable.NewMemoryTable(),
			Secrets: auth.NewMemorySecrets(), Events: event.NewMemoryStore()},
		Slicer: stack.SlicerBackends{Lease: slicer.NewMemoryLease(nil), Backlog: slicer.NewMemoryBacklog(nil)},
	}
	front := stacktest.Start(t, stack.Config{
		Roles: []string{stack.RoleGSLB, stack.RoleIngest, stack.RoleEdge, stack.RoleOrigin},
		Dev:   true, MasterKey: master, Backends: b, Logger: log,
	})
	// A fixed address, so that the slicer started after the fault is the
	// same target to Prometheus.
	slicerAddr := testenv.FreeAddr(t)
	first := startSlicer(t, b, slicerAddr, "slicer-a", log)

	cfg := prometheusConfig(t, map[string]string{
		"front":  strings.TrimPrefix(front.URLs[stack.RoleGSLB], "http://"),
		"slicer": slicerAddr,
	})
	prom := promAPI{base: testenv.Prometheus(t, cfg), hc: &http.Client{Timeout: 5 * time.Second}}
	const alert = "DanmakuRoomWithoutLeader"

	// Healthy first: the demo room is led, and the alert is not active.
	await(t, "the slicer leads the demo room, seen through Prometheus", func() (bool, error) {
		led, ok, err := prom.scalar("sum(danmaku_slicer_rooms_led)")
		return ok && led >= 1, err
	})
	await(t, alert+" inactive while a leader runs", func() (bool, error) {
		s, err := prom.alertState(alert)
		return err == nil && s == "", err
	})

	first.stop()
	fault := time.Now()
	pendingAt := await(t, alert+" pending after the leader stopped", func() (bool, error) {
		s, err := prom.alertState(alert)
		return s == "pending" || s == "firing", err
	})
	firingAt := await(t, alert+" firing after the leader stopped", func() (bool, error) {
		s, err := prom.alertState(alert)
		return s == "firing", err
	})

	startSlicer(t, b, slicerAddr, "slicer-b", log)
	recovery := time.Now()
	resolvedAt := await(t, alert+" resolved after a slicer started again", func() (bool, error) {
		s, err := prom.alertState(alert)
		return err == nil && s == "", err
	})
	led, ok, err := prom.scalar("sum(danmaku_slicer_rooms_led)")
	if err != nil || !ok || led < 1 {
		t.Errorf("after recovery: sum(danmaku_slicer_rooms_led) = %v (ok %v, err %v), want >= 1", led, ok, err)
	}
	t.Logf("%s (for: 10s; scrape and evaluation every %s): fault → pending %.1f s, fault → firing %.1f s; recovery → resolved %.1f s",
		alert, promInterval, pendingAt.Sub(fault).Seconds(), firingAt.Sub(fault).Seconds(), resolvedAt.Sub(recovery).Seconds())
}
