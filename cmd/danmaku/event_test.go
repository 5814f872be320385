package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testenv"
	"danmaku/internal/testwait"
	"danmaku/sdk"
)

// eventFile writes an event file for rooms, live from now for an hour, in
// the YAML an operator writes, and returns its path.
func eventFile(t *testing.T, id string, rooms ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("id: " + id + "\ntitle: test event\nstart: now\nend: +1h\nrooms:\n")
	for _, r := range rooms {
		b.WriteString("  - id: " + r + "\n    budget: 60\n    shares: [0.1, 0.3, 0.2, 0.4]\n")
	}
	p := filepath.Join(t.TempDir(), id+".yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// eventCLI runs `danmaku event ARGS` with env (whose DANMAKU_OPERATOR_KEYS'
// first key becomes DANMAKU_OPERATOR_KEY) and returns its output.
func eventCLI(t *testing.T, ctx context.Context, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"event"}, args...)...)
	cmd.Env = env
	for _, kv := range env {
		if k, ok := strings.CutPrefix(kv, "DANMAKU_OPERATOR_KEYS="); ok {
			cmd.Env = append(cmd.Env, "DANMAKU_OPERATOR_KEY="+strings.Split(k, ",")[0])
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("danmaku event %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestLoadEventFile(t *testing.T) {
	now := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ev, err := loadEventFile(write("a.yaml", "id: xmas\nstart: now+30m\nend: 2026-12-24T23:00:00Z\nrooms:\n  - id: stage\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	if ev["start"] != "2026-12-24T18:30:00Z" || ev["end"] != "2026-12-24T23:00:00Z" {
		t.Fatalf("times %v %v", ev["start"], ev["end"])
	}
	if _, err := loadEventFile(write("b.json", `{"id":"x","start":"+2h","end":"+3h","rooms":[{"id":"r"}]}`), now); err != nil {
		t.Fatalf("JSON file: %v", err)
	}
	for name, body := range map[string]string{
		"bad time":     "id: x\nstart: tomorrow\n",
		"bad relative": "id: x\nstart: now-1h\n",
		"not a map":    "- 1\n- 2\n",
		"not yaml":     "id: [\n",
	} {
		if _, err := loadEventFile(write(strings.ReplaceAll(name, " ", "_")+".yaml", body), now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestEventLifecycle is issue 7's acceptance 1: every role as its own
// process on Redis, versitygw and Varnish; an event created from a file
// with `danmaku event create`; a viewer enters and sees a comment and a
// gift; a room of no event is refused at the entry and the gift API, and
// the event's room at the ingest once it has ended; after `danmaku event
// end` the viewer is told, the slicer holds no room, the edge no hub, and
// the room's Redis keys are gone or expiring.
func TestEventLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes against real servers")
	}
	bin := binary(t)
	redisAddr := testenv.Redis(t)
	rdb := redistest.Dial(t, redisConfig(redisAddr))
	env := testenv.S3(t)
	cdn := testenv.Varnish(t, env.BucketURL()) + "/ev/"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ports := freePorts(t, 6)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	const ticketKey = "event-test-ticket-key-0123456789"
	base := append(os.Environ(),
		"DANMAKU_REDIS="+redisAddr,
		"DANMAKU_S3_BUCKET="+env.Bucket, "DANMAKU_S3_ENDPOINT="+env.Endpoint, "DANMAKU_S3_REGION="+env.Region,
		"DANMAKU_S3_PATH_STYLE=true", "DANMAKU_S3_PREFIX=ev/",
		"DANMAKU_S3_ACCESS_KEY="+env.AccessKey, "DANMAKU_S3_SECRET_KEY="+env.SecretKey,
		"DANMAKU_GIFT_KEYS=gift-key", "DANMAKU_OPERATOR_KEYS=op-key", "DANMAKU_TICKET_KEY="+ticketKey,
		"DANMAKU_AUDIT_DIR="+diskDir(t),
	)
	start := func(extraEnv []string, args ...string) {
		startRole(t, ctx, bin, append(append([]string(nil), base...), extraEnv...), args...)
	}
	start([]string{"DANMAKU_MASTER_KEY=" + hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))}, "gslb", "-gslb", addr(0), "-cdn", cdn)
	start(nil, "ingest", "-ingest", addr(1), "-metrics-addr", addr(4))
	start(nil, "edge", "-edge", addr(2), "-metrics-addr", addr(5))
	start(nil, "slicer", "-slicer", addr(3), "-node-id", "slicer-1")
	gslbURL := "http://" + addr(0)

	out := eventCLI(t, ctx, bin, base, "create", "-gslb", gslbURL, "-f", eventFile(t, "gala", "concert"))
	if !strings.Contains(out, `"state": "live"`) {
		t.Fatalf("event create printed:\n%s", out)
	}
	if out := eventCLI(t, ctx, bin, base, "list", "-gslb", gslbURL); !strings.Contains(out, `"gala"`) {
		t.Fatalf("event list printed:\n%s", out)
	}

	// A viewer enters and sees a comment (through the CDN) and a gift.
	tk := func(user string) string {
		s, err := auth.MintTicket([]byte(ticketKey), user, auth.Ticket{Nick: user}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c, err := sdk.New(sdk.Config{EntryURL: gslbURL, Room: "concert", Ticket: tk("viewer"), FirstJoinJitter: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	for c.Stats().EdgeConnects == 0 {
		select {
		case err := <-runDone:
			t.Fatalf("client stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("client never connected to the edge")
		case <-time.After(50 * time.Millisecond):
		}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = base
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if out, err := run("send", "-entry", gslbURL, "-room", "concert", "-ticket", tk("alice"), "encore!"); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	if out, err := run("gift", "-ingest", "http://"+addr(1), "-key", "gift-key", "-room", "concert", "-user", "bob", "-gift", "rose", "-value", "100", "-order", "gala-1"); err != nil {
		t.Fatalf("gift: %v\n%s", err, out)
	}
	got := map[string]int{}
	for got["barrage"] == 0 || got["gift"] == 0 {
		select {
		case m := <-c.Messages():
			got[m.Kind.String()]++
		case <-ctx.Done():
			t.Fatalf("got %v; stats %+v", got, c.Stats())
		}
	}

	// A room of no event: refused at the entry and at the gift API.
	if out, err := run("send", "-entry", gslbURL, "-room", "bootleg", "-ticket", tk("alice"), "hi"); err == nil || !strings.Contains(out, "no_such_room") {
		t.Fatalf("entry for a room of no event: %v\n%s", err, out)
	}
	if out, err := run("gift", "-ingest", "http://"+addr(1), "-key", "gift-key", "-room", "bootleg", "-user", "bob", "-gift", "rose", "-value", "1", "-order", "b-1"); err == nil || !strings.Contains(out, "no_such_room") {
		t.Fatalf("gift to a room of no event: %v\n%s", err, out)
	}

	// End it. The viewer is told and stops; its token no longer posts.
	if out := eventCLI(t, ctx, bin, base, "end", "-gslb", gslbURL, "gala"); !strings.Contains(out, `"state": "ended"`) {
		t.Fatalf("event end printed:\n%s", out)
	}
	select {
	case err := <-runDone:
		if !errors.Is(err, sdk.ErrRoomEnded) {
			t.Fatalf("viewer stopped with %v, want ErrRoomEnded", err)
		}
	case <-ctx.Done():
		t.Fatalf("the viewer was never told the room ended; stats %+v", c.Stats())
	}
	entry := c.Entry()
	if err := apiCall(ctx, "POST", entry.Ingest[0]+"/v1/rooms/concert/barrage", entry.Token, map[string]string{"text": "late"}, nil); err == nil || !strings.Contains(err.Error(), "room_not_live") {
		t.Fatalf("barrage after the end: %v", err)
	}

	// Nothing of the room is left running.
	waitMetric(t, ctx, "http://"+addr(3), "danmaku_slicer_rooms", 0)
	waitMetric(t, ctx, "http://"+addr(5), "danmaku_edge_rooms", 0) // the edge's metrics listener
	for _, lane := range []string{"barrage", "live"} {
		key := "danmaku:{room:concert}:" + lane
		if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || (ttl <= 0 && ttl != -2*time.Nanosecond) {
			t.Errorf("%s: PTTL %v, %v: want expiring or gone", key, ttl, err)
		}
	}
	if n, _ := rdb.Exists(ctx, "danmaku:{room:concert}:leader").Result(); n != 0 {
		t.Error("the room's lease is still held")
	}
	if ok, _ := rdb.HExists(ctx, "danmaku:rooms", "concert").Result(); ok {
		t.Error("the room is still registered")
	}
}

// waitMetric waits until the unlabelled metric name of the role at base
// reads want.
func waitMetric(t *testing.T, ctx context.Context, base, name string, want float64) {
	t.Helper()
	var (
		v   float64
		err error
	)
	if !testwait.Poll(ctx, func() bool { v, err = metricValue(ctx, base, name); return err == nil && v == want }) {
		t.Fatalf("%s at %s: %v (%v), want %v", name, base, v, err, want)
	}
}

func metricValue(ctx context.Context, base, name string) (float64, error) {
	series, err := testenv.MetricSeries(ctx, base, name)
	if err != nil {
		return 0, err
	}
	v, ok := series[""]
	if !ok {
		return 0, fmt.Errorf("no %s", name)
	}
	return v, nil
}

// TestExampleEvents: the example event files the runbook points to are
// events the API accepts.
func TestExampleEvents(t *testing.T) {
	files, err := filepath.Glob("../../infra/events/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example events: %v", err)
	}
	for _, f := range files {
		raw, err := loadEventFile(f, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(raw)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // as the API binds it
		var ev event.Event
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
