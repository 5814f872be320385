// Package stacktest runs the whole pipeline in a test process, for the
// tests of clients (the SDKs) that need a real one: every role on free
// loopback ports, in-memory backends unless the Config names others.
package stacktest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/stack"
)

// Start runs cfg's roles on free loopback ports until tb ends, and returns
// once the gslb hands out addresses. A nil Logger discards. Without real
// backends the stack runs as `danmaku dev` does (Config.Dev: dev keys).
func Start(tb testing.TB, cfg stack.Config) *stack.Stack {
	tb.Helper()
	if cfg.Backends.Shared.Streams == nil {
		cfg.Dev = true
	}
	cfg.GSLBAddr, cfg.IngestAddr, cfg.EdgeAddr, cfg.OriginAddr, cfg.SlicerAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	st, err := stack.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("stack run: %v", err)
		}
	})
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if err := st.Ready(rctx); err != nil {
		tb.Fatalf("stack not ready: %v", err)
	}
	return st
}

// LiveEvent is an event holding rooms, live from a minute ago for an hour:
// only rooms of a live event exist for clients.
func LiveEvent(id string, rooms ...string) event.Event {
	now := time.Now()
	e := event.Event{ID: id, Start: now.Add(-time.Minute), End: now.Add(time.Hour)}
	for _, r := range rooms {
		e.Rooms = append(e.Rooms, event.Room{ID: r})
	}
	return e
}

// Ticket mints a business ticket for user with the public dev key, which
// an embedded stack accepts.
func Ticket(tb testing.TB, user, role string, rooms ...string) string {
	tb.Helper()
	// A host or admin role holds only in the rooms a ticket names: tests
	// that act as hosts name theirs.
	tk, err := auth.MintTicket(auth.DevTicketKey, user, auth.Ticket{Nick: user, Role: role, Rooms: rooms}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

// ClientReports is what the clients' reports to st's edge added up to.
type ClientReports struct {
	// Refused counts reports the edge refused: malformed or out of range
	// (danmaku_edge_client_bad_reports_total), over the connection's
	// bound or too soon after its last
	// (danmaku_edge_client_reports_refused_total).
	Refused float64
	// FirstPolls and Hits are danmaku_client_first_polls_total, all
	// outcomes and "hit".
	FirstPolls, Hits float64
	// Latencies is the count of danmaku_client_barrage_latency_seconds,
	// Skews of danmaku_client_display_skew_seconds (playhead sync).
	Latencies, Skews float64
}

// Reports reads ClientReports from st's registry.
func Reports(tb testing.TB, st *stack.Stack) ClientReports {
	tb.Helper()
	mfs, err := st.Gatherer().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var r ClientReports
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "danmaku_edge_client_bad_reports_total", "danmaku_edge_client_reports_refused_total":
				r.Refused += m.GetCounter().GetValue()
			case "danmaku_client_first_polls_total":
				r.FirstPolls += m.GetCounter().GetValue()
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "hit" {
						r.Hits += m.GetCounter().GetValue()
					}
				}
			case "danmaku_client_barrage_latency_seconds":
				r.Latencies += float64(m.GetHistogram().GetSampleCount())
			case "danmaku_client_display_skew_seconds":
				r.Skews += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return r
}
