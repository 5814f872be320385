package ingest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/stream"
)

// A comment's playhead_ms is kept when it is within the bounds around the
// node's clock and refused with its code outside them; a body without one
// (an old client) is stored as before.
func TestBarragePlayhead(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Addr = selfAddr })
	now := f.clk.Now().UnixMilli()
	cases := []struct {
		name     string
		playhead string
		status   int
		code     string
		stored   int64
	}{
		{"none", "", http.StatusOK, "", 0},
		{"now", fmt.Sprint(now), http.StatusOK, "", now},
		{"15 s behind", fmt.Sprint(now - 15_000), http.StatusOK, "", now - 15_000},
		{"at the ahead bound", fmt.Sprint(now + 2_000), http.StatusOK, "", now + 2_000},
		{"at the behind bound", fmt.Sprint(now - 120_000), http.StatusOK, "", now - 120_000},
		{"past the ahead bound", fmt.Sprint(now + 2_001), http.StatusBadRequest, "playhead_future", 0},
		{"past the behind bound", fmt.Sprint(now - 120_001), http.StatusBadRequest, "playhead_too_old", 0},
		{"zero", "0", http.StatusBadRequest, "bad_playhead", 0},
		{"negative", "-5", http.StatusBadRequest, "bad_playhead", 0},
		{"fraction", "1.5", http.StatusBadRequest, "", 0},
		{"string", `"1700000000000"`, http.StatusBadRequest, "", 0},
		{"null", "null", http.StatusOK, "", 0},
	}
	stored := 0
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"text":"comment %d"}`, i)
			if c.playhead != "" {
				body = fmt.Sprintf(`{"text":"comment %d","playhead_ms":%s}`, i, c.playhead)
			}
			// A user per case keeps the user bucket out of the test.
			rec := f.do(http.MethodPost, barragePath(room), f.token(t, room, fmt.Sprint("u", i), auth.RoleViewer), body)
			if rec.Code != c.status {
				t.Fatalf("%s: %d %s, want %d", body, rec.Code, rec.Body, c.status)
			}
			if c.status != http.StatusOK {
				if code := errorCode(t, rec); c.code != "" && code != c.code {
					t.Errorf("code %q, want %q", code, c.code)
				}
				return
			}
			stored++
			es := f.entries(t, room, stream.Barrage)
			if len(es) != stored {
				t.Fatalf("stored %d, want %d", len(es), stored)
			}
			if got := es[len(es)-1].Playhead; got != c.stored {
				t.Errorf("stored playhead %d, want %d", got, c.stored)
			}
		})
	}
}

// An announcement carries its sender's playhead too, checked the same way.
func TestAnnouncePlayhead(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.PlayheadBehind = 30 * time.Second })
	now := f.clk.Now().UnixMilli()
	tok := f.token(t, room, "h1", auth.RoleHost)
	rec := f.do(http.MethodPost, announcePath(room), tok, fmt.Sprintf(`{"text":"goal","playhead_ms":%d}`, now-10_000))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	es := f.entries(t, room, stream.Live)
	if len(es) != 1 || es[0].Playhead != now-10_000 {
		t.Fatalf("live lane %+v", es)
	}
	rec = f.do(http.MethodPost, announcePath(room), tok, fmt.Sprintf(`{"text":"goal","playhead_ms":%d}`, now-30_001))
	if rec.Code != http.StatusBadRequest || errorCode(t, rec) != "playhead_too_old" {
		t.Fatalf("a playhead past the configured bound: %d %s", rec.Code, rec.Body)
	}
}
