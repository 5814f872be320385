package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"danmaku/ingest"
	"danmaku/internal/httpx"
	"danmaku/internal/stack"
	"danmaku/sdk/wire"
)

func TestModerateReports(t *testing.T) {
	t.Setenv("DANMAKU_OPERATOR_KEY", stack.DevServiceKey)
	ctx := context.Background()
	store := ingest.NewMemoryReportStore(ingest.ReportBounds{}, nil)
	bans := ingest.NewMemoryBanStore()
	now := time.Now()
	add := func(id, user, reporter string) {
		t.Helper()
		r := ingest.Report{Room: "main", Message: ingest.ReportedMessage{ID: id, Kind: wire.KindBarrage, User: user, Text: "buy now", Known: user != ""},
			Reporter: reporter, Reason: ingest.ReportSpam, At: now, Expires: now.Add(time.Hour)}
		if _, err := store.Add(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	add("1700000000000-1", "troll", "a")
	add("1700000000000-1", "troll", "b")
	add("1700000000000-2", "", "a")
	e := httpx.NewEngine(httpx.EngineConfig{Role: "ingest"})
	(&ingest.ReportAPI{Store: store, Bans: bans, Keys: []string{stack.DevServiceKey}}).Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()

	var out bytes.Buffer
	if err := runModerateReports(ctx, []string{"main", "-ingest", srv.URL, "-n", "5"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "2 ") || !strings.Contains(lines[1], "troll") || !strings.Contains(lines[1], "spam:2") ||
		!strings.Contains(lines[2], "not held by the stream") {
		t.Fatalf("reports:\n%s", out.String())
	}

	out.Reset()
	if err := runModerateReview(ctx, []string{"main", "1700000000000-1", "ban", "-ingest", srv.URL, "-ttl", "10m", "-reason", "spam links"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ban by an operator") || !strings.Contains(out.String(), "banned: room main, until") {
		t.Fatalf("review:\n%s", out.String())
	}
	if got, _ := bans.User(ctx, "troll"); len(got) != 1 || got[0].Room != "main" || got[0].Until.Sub(got[0].At) != 10*time.Minute {
		t.Fatalf("bans %+v", got)
	}
	// The server's refusal comes back with its code.
	err := runModerateReview(ctx, []string{"main", "1700000000000-2", "ban", "-ingest", srv.URL}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "sender_unknown") {
		t.Fatalf("a ban of an unknown sender: %v", err)
	}
	for _, args := range [][]string{
		{"main", "1-0"},
		{"main", "1-0", "shrug"},
		{"a.b", "1-0", "dismiss"},
		{"main", "1-0", "dismiss", "-kind", "7"},
		{"main", "1-0", "ban", "-ttl", "10ms"},
	} {
		var ue usageError
		if err := runModerateReview(ctx, append(args, "-ingest", srv.URL), io.Discard, io.Discard); !errors.As(err, &ue) {
			t.Errorf("review %q: %v, want a usage error", args, err)
		}
	}
	var ue usageError
	if err := runModerateReports(ctx, []string{"main", "-n", "0"}, io.Discard, io.Discard); !errors.As(err, &ue) {
		t.Errorf("-n 0: %v", err)
	}
	if _, ok := moderateReportSubs["reports"]; !ok {
		t.Error("the dispatcher's map lacks reports")
	}
}
