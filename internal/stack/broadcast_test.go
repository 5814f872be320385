package stack

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/internal/event"
	"danmaku/sdk/wire"
)

// TestSiteBroadcastThroughStack: an operator's site-wide broadcast, posted
// to the ingest, is in the segments of every live room exactly once, with
// the site stream's id and the site flag.
func TestSiteBroadcastThroughStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few seconds of real segments")
	}
	const opKey = "operator-key-0123456789abcdef"
	now := time.Now()
	ev := event.Event{ID: "fest", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "stage-a"}, {ID: "stage-b"}}}
	st, err := New(Config{
		Dev: true, Events: []event.Event{ev}, OperatorKeys: []string{opKey}, AuditDir: t.TempDir(),
		GSLBAddr: "127.0.0.1:0", IngestAddr: "127.0.0.1:0", EdgeAddr: "127.0.0.1:0", OriginAddr: "127.0.0.1:0", SlicerAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if err := st.Ready(rctx); err != nil {
		t.Fatal(err)
	}

	req, _ := http.NewRequest(http.MethodPost, st.URLs[RoleIngest]+"/v1/admin/broadcasts", strings.NewReader(`{"text":"Gates open in 5 minutes"}`))
	req.Header.Set("Authorization", "Bearer "+opKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ans struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || ans.ID == "" {
		t.Fatalf("post: %d, id %q", resp.StatusCode, ans.ID)
	}
	sec, err := wire.SecondOf(ans.ID)
	if err != nil {
		t.Fatal(err)
	}
	objects := st.cfg.Backends.Shared.Objects
	for _, room := range []string{"stage-a", "stage-b"} {
		// The broadcast's second and the two after it (a carried one lands
		// later); each written within a few seconds.
		found := 0
		for s := sec; s <= sec+2; s++ {
			var seg *wire.Segment
			waitFor(t, rctx, "segment "+room, func() bool {
				obj, err := objects.Get(context.Background(), wire.SegmentKey(room, s))
				if err != nil {
					return false
				}
				seg, err = wire.DecodeSegment(obj.Body)
				return err == nil
			})
			for _, m := range seg.Messages {
				if m.ID == ans.ID {
					if !m.Site || m.Kind != wire.KindSystem || m.Text != "Gates open in 5 minutes" {
						t.Fatalf("%s: %+v", room, m)
					}
					found++
				}
			}
		}
		if found != 1 {
			t.Fatalf("room %s holds the broadcast %d times in seconds %d..%d, want once", room, found, sec, sec+2)
		}
	}
}
