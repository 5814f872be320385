package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"danmaku/internal/event"
	"danmaku/internal/loadgen"
	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

func TestLoadgenFlags(t *testing.T) {
	env := map[string]string{"DANMAKU_TICKET_KEY": "ticket-key-0123456789abcdef0123456789", "DANMAKU_GIFT_KEY": "gift-key"}
	cfg, o, err := parseLoadgen([]string{
		"-gslb", "http://127.0.0.1:9", "-users", "10000", "-pattern", "pulse", "-pulse-peak", "38k/s", "-pulse-ramp", "10s",
		"-duration", "20s", "-unthrottled", "-keyword", "抽奖", "-keyword-share", "0.5", "-gifts", "0", "-pollers", "0",
		"-procs", "4", "-json", "out.json", "-quiet",
	}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PulsePeak != 38000 || cfg.Pattern != loadgen.PatternPulse || !cfg.Unthrottled || cfg.Keyword != "抽奖" || cfg.KeywordShare != 0.5 ||
		cfg.GiftRate >= 0 || cfg.Pollers >= 0 || string(cfg.TicketKey) != env["DANMAKU_TICKET_KEY"] || cfg.GiftKey != "gift-key" {
		t.Errorf("config: %+v", cfg)
	}
	// The children get the run's flags and one run id, never the
	// parent's -procs, -json or -quiet (each writes its own report).
	if o.procs != 4 || cfg.RunID == "" {
		t.Fatalf("procs %d run id %q", o.procs, cfg.RunID)
	}
	for _, want := range []string{"-pulse-peak=38000/s", "-keyword=抽奖", "-unthrottled=true", "-gifts=0/s", "-users=10000", "-run-id=" + cfg.RunID} {
		if !slices.Contains(o.childArgs, want) {
			t.Errorf("child args %q lack %q", o.childArgs, want)
		}
	}
	for _, a := range o.childArgs {
		if strings.HasPrefix(a, "-procs") || strings.HasPrefix(a, "-json") || strings.HasPrefix(a, "-quiet") {
			t.Errorf("child args %q hold %q", o.childArgs, a)
		}
	}
	// A child's flags read back as the same run, one shard of it.
	child, _, err := parseLoadgen(append(slices.Clone(o.childArgs), "-shard=1/4"), func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if child.PulsePeak != cfg.PulsePeak || child.RunID != cfg.RunID || child.Shard != 1 || child.Shards != 4 || child.KeywordShare != 0.5 {
		t.Errorf("child config %+v", child)
	}

	for _, bad := range [][]string{
		{"-procs", "2", "-shard", "0/2"}, {"-procs", "0"}, {"-shard", "2/2"}, {"-rate", "fast"}, {"-users", "0"},
		{"-pattern", "pulse", "-pulse-peak", "0"}, {"-merge"}, {"extra"},
		{"-slo", "slo.json"}, {"-html", "r.html", "-entry-pulse"},
	} {
		if _, _, err := parseLoadgen(bad, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// A bad service-level file fails before any load, naming the field.
	slo := filepath.Join(t.TempDir(), "slo.json")
	if err := os.WriteFile(slo, []byte(`{"v":1,"barrage_latency_p99_ms":-5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = runLoadgen(context.Background(), []string{"-gslb", "http://127.0.0.1:9", "-html", "r.html", "-slo", slo}, io.Discard, io.Discard)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "barrage_latency_p99_ms") {
		t.Errorf("bad -slo: %v", err)
	}
}

// TestLoadgenProcs runs the binary's -procs 2 against the pipeline in this
// process: two children, each one shard, whose reports merge into one that
// adds up — every comment sent answered once by reason, the nodes'
// counters (read by both) counted once.
func TestLoadgenProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the pipeline")
	}
	bin := binary(t)
	st := stacktest.Start(t, stack.Config{Events: []event.Event{stacktest.LiveEvent("lg", "lg-room")}})
	out := filepath.Join(t.TempDir(), "report.json")
	page := filepath.Join(t.TempDir(), "report.html")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "loadgen", "-gslb", st.URLs[stack.RoleGSLB], "-room", "lg-room",
		"-users", "20", "-rate", "8/s", "-duration", "2s", "-gifts", "2/s", "-pollers", "2", "-drain", "1m",
		"-concurrency", "8", "-entry-concurrency", "8", "-procs", "2", "-json", out, "-html", page)
	text, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("loadgen -procs 2: %v\n%s", err, text)
	}
	t.Logf("\n%s", text)
	if !strings.Contains(string(text), "[1/2] ") {
		t.Error("no progress relayed from the second child")
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep loadgen.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	br := rep.Barrage
	var answers int64
	for _, n := range br.Errors {
		answers += n
	}
	if rep.Run.Shards != 2 || rep.Users.Joined != 20 || br.OK == 0 || br.Attempted != br.OK+answers ||
		br.Due != br.Attempted+br.HeldBack+br.NotOffered+br.NoEntry {
		t.Errorf("merged: run %+v users %+v barrage %+v", rep.Run, rep.Users, br)
	}
	if rep.Latency.BarragePost.Count != br.Attempted {
		t.Errorf("%d POST latencies for %d attempted", rep.Latency.BarragePost.Count, br.Attempted)
	}
	if rep.Drops.Accepted["barrage"] != br.OK || rep.Drops.BarrageUnaccounted != 0 {
		t.Errorf("drops: %d answered ok, %+v", br.OK, rep.Drops)
	}
	if g := rep.Gifts; g.Orders == 0 || g.Accepted != g.Orders || rep.Drops.Accepted["gift"] != g.Accepted {
		t.Errorf("gifts: %+v, stored %d", g, rep.Drops.Accepted["gift"])
	}
	if d := rep.Delivery; d.Joined != 2 || d.CommentsShown != br.OK {
		t.Errorf("delivery: %+v", d)
	}
	// The per-second figures the HTML report charts add up, and the nodes
	// were read while the load ran (the first shard's reads).
	var shown int64
	for _, s := range rep.Timeline {
		shown += s.Shown
	}
	if shown != rep.Delivery.CommentsShown {
		t.Errorf("timeline shows %d comments, delivery %d", shown, rep.Delivery.CommentsShown)
	}
	if n := rep.Nodes.Nodes; len(n) == 0 || len(n[0].Samples) == 0 || !slices.Contains(n[0].Roles, "ingest") {
		t.Errorf("nodes: %+v", rep.Nodes)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), `<script id="report-data" type="application/json">`) || !strings.Contains(string(text), "html report: "+page) {
		t.Errorf("no HTML report written (%d bytes)", len(html))
	}
}
