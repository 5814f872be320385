package stack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/sdk/wire"
)

// TestAuditTrailThroughStack: as `danmaku dev` runs it, the process's one
// recorder takes the ingest's decision on every comment and the slicer's
// on the ones its budget sampled away, and everything is on disk once the
// stack has stopped.
func TestAuditTrailThroughStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few seconds of real segments")
	}
	const room, comments = "aud", 40
	dir := t.TempDir()
	st, err := New(Config{
		Dev: true, Budget: 5, AuditDir: dir, Events: []event.Event{liveEvent(room)},
		GSLBAddr: "127.0.0.1:0", IngestAddr: "127.0.0.1:0", EdgeAddr: "127.0.0.1:0", OriginAddr: "127.0.0.1:0", SlicerAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if err := st.Ready(rctx); err != nil {
		t.Fatal(err)
	}
	// Entries first, then the comments in a burst: they fall in one or
	// two seconds, far over the budget.
	var entries []wire.Entry
	for i := range comments {
		entries = append(entries, fetchEntry(t, st.URLs[RoleGSLB], room, ticket(t, fmt.Sprintf("u%d", i), auth.RoleViewer)))
	}
	errs := make(chan error, comments)
	for i, e := range entries {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, e.Ingest[0]+"/v1/rooms/"+room+"/barrage", strings.NewReader(fmt.Sprintf(`{"text":"comment %d"}`, i)))
			req.Header.Set("Authorization", "Bearer "+e.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("comment %d: status %d", i, resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for range comments {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The comments fell in seconds before now (the stream's clock decides
	// a message's second): once the slicer has written a segment that
	// starts at or after now, every one of them is written and audited.
	answered, err := st.cfg.Backends.Shared.Streams.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute) // a guard against a hang
	defer wcancel()
	waitFor(t, wctx, "the seconds of the comments written", func() bool {
		obj, err := st.cfg.Backends.Shared.Objects.Get(ctx, wire.ManifestKey(room))
		if err != nil {
			return false
		}
		man, err := wire.DecodeManifest(obj.Body)
		return err == nil && man.StartMs() >= answered.UnixMilli()
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the deferred wait

	store, err := objstore.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	stored, sampled := map[string]bool{}, 0
	err = audit.Read(context.Background(), store, audit.Query{Room: room}, func(r audit.Record) error {
		switch r.Decision {
		case audit.Stored:
			stored[r.User] = true
		case audit.Sampled:
			sampled++
			if r.ID == "" || !stored[r.User] {
				return fmt.Errorf("sampled record %+v: no id, or no stored record before it", r)
			}
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Budget 5 a second (all of it barrage's, with nothing else to show):
	// the burst's one to three seconds show at most 15.
	if len(stored) != comments || sampled < comments-15 {
		t.Fatalf("%d users' comments recorded stored, %d sampled; want %d and at least %d", len(stored), sampled, comments, comments-15)
	}
}
