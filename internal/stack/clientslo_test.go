package stack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/sdk"
)

// TestClientServiceLevelsReachTheEdge: a viewer's reports carry its
// segments, first-poll hits and the latency of the barrage it was given,
// and the edge's metrics add them up — the Go SDK's frame as the edge
// reads it, through the whole pipeline.
func TestClientServiceLevelsReachTheEdge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few seconds of real segments")
	}
	const room = "slo"
	st := startStack(t, Config{Events: []event.Event{liveEvent(room)}})
	entry := st.URLs[RoleGSLB]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	run := func(c *sdk.Client) {
		wg.Add(2)
		go func() { defer wg.Done(); _ = c.Run(ctx) }()
		go func() {
			defer wg.Done()
			for range c.Messages() {
			}
		}()
	}
	viewer, err := sdk.New(sdk.Config{EntryURL: entry, Room: room, Ticket: ticket(t, "viewer", auth.RoleViewer), FirstJoinJitter: -1, ReportInterval: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	run(viewer)
	waitFor(t, ctx, "the viewer joined", func() bool { return viewer.Stats().EdgeConnects > 0 })
	const sent = 2
	for i := range sent {
		c, err := sdk.New(sdk.Config{EntryURL: entry, Room: room, Ticket: ticket(t, fmt.Sprintf("sender%d", i), auth.RoleViewer), NoEdge: true, FirstJoinJitter: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		run(c)
		if err := c.Send(ctx, fmt.Sprintf("hello %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var polls, hits, latencies float64
	waitFor(t, ctx, "the viewer's reports in the edge's metrics", func() bool {
		polls, hits, latencies = clientSLOMetrics(t, st)
		s := viewer.Stats()
		return latencies == sent && polls > 0 && polls == float64(s.SegmentsFetched) && hits == float64(s.FirstPollHits)
	})
	t.Logf("segments %v, first-poll hits %v, barrage latencies %v", polls, hits, latencies)
}

// clientSLOMetrics reads the clients' first polls (all, and hits) and the
// count of their barrage latencies from the stack's registry.
func clientSLOMetrics(t *testing.T, st *Stack) (polls, hits, latencies float64) {
	t.Helper()
	mfs, err := st.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "danmaku_client_first_polls_total":
				polls += m.GetCounter().GetValue()
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "hit" {
						hits += m.GetCounter().GetValue()
					}
				}
			case "danmaku_client_barrage_latency_seconds":
				latencies += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return polls, hits, latencies
}
