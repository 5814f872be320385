package reload_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"danmaku/internal/reload"
	"danmaku/internal/testenv"
)

// TestEvery: refreshed at once and then on every tick; a run of failures
// is logged once, the recovery once; ctx ends it with nil.
func TestEvery(t *testing.T) {
	var buf testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	calls := 0
	refresh := func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case calls >= 2 && calls <= 4:
			return errors.New("store down")
		case calls == 6:
			cancel()
		}
		return nil
	}
	if err := reload.Every(ctx, time.Millisecond, log, "thing", refresh); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "thing reload failed"); n != 1 {
		t.Errorf("failure logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "thing reloads again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, out)
	}
	if calls != 6 {
		t.Errorf("refresh called %d times, want 6", calls)
	}
}
