package stack_test

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
	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
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
	// The viewer reports every 100 ms, and a loaded machine may deliver
	// two of its ticks back to back: the edge spaces reports by no more
	// than a nanosecond here (its default is 5 s against the SDKs' 10 s).
	st := stacktest.Start(t, stack.Config{Events: []event.Event{stacktest.LiveEvent(room, room)}, EdgeReportEvery: time.Nanosecond})
	entry := st.URLs[stack.RoleGSLB]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// waitFor polls cond until it holds; ctx is only a guard against a hang.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("gave up waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	run := func(c *sdk.Client) {
		wg.Add(2)
		go func() { defer wg.Done(); _ = c.Run(ctx) }()
		go func() {
			defer wg.Done()
			for range c.Messages() {
			}
		}()
	}
	viewer, err := sdk.New(sdk.Config{EntryURL: entry, Room: room, Ticket: stacktest.Ticket(t, "viewer", auth.RoleViewer), FirstJoinJitter: -1, ReportInterval: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	run(viewer)
	waitFor("the viewer joined", func() bool { return viewer.Stats().EdgeConnects > 0 })
	const sent = 2
	for i := range sent {
		c, err := sdk.New(sdk.Config{EntryURL: entry, Room: room, Ticket: stacktest.Ticket(t, fmt.Sprintf("sender%d", i), auth.RoleViewer), NoEdge: true, FirstJoinJitter: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		run(c)
		if err := c.Send(ctx, fmt.Sprintf("hello %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var r stacktest.ClientReports
	waitFor("the viewer's reports in the edge's metrics", func() bool {
		r = stacktest.Reports(t, st)
		s := viewer.Stats()
		return r.Latencies == sent && r.FirstPolls > 0 && r.FirstPolls == float64(s.SegmentsFetched) && r.Hits == float64(s.FirstPollHits)
	})
	t.Logf("edge: %+v", r)
	if r.Refused != 0 {
		t.Errorf("%v reports refused", r.Refused)
	}
}
