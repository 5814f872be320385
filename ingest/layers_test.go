package ingest

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
)

// TestLayersThroughBarrage runs each anti-spam layer through the handler:
// what it answers, what is stored, what is counted, and that every comment
// is in the audit trail with its decision.
func TestLayersThroughBarrage(t *testing.T) {
	clk := clock.NewFake(t0)
	bans := NewMemoryBanStore()
	trail := objstore.NewMemoryStore()
	rec, err := audit.New(audit.Config{Store: trail, Node: "n1", Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, clk, stream.NewMemoryStore(clk), func(c *Config) {
		c.Bans, c.Audit = bans, rec
		c.Words = StaticWords{"spam"}
		c.UserCapacity = 100
	})
	ctx := context.Background()
	viewer := func(u string) string { return f.token(t, room, u, auth.RoleViewer) }

	f.barrage(t, viewer("u1"), "hello")
	f.barrage(t, viewer("u2"), "hello") // a copy from another user: dropped
	f.barrage(t, viewer("u3"), "buy spam now")
	if err := bans.Put(ctx, Ban{User: "u4", At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Bans().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	f.barrage(t, viewer("u4"), "i am banned")
	got := f.entries(t, room, stream.Barrage)
	if len(got) != 2 || got[0].Text != "hello" || got[1].Text != "buy **** now" {
		t.Fatalf("stored %+v, want hello and the masked comment", got)
	}
	for _, r := range []struct{ layer, reason string }{{"antispam", "duplicate"}, {"antispam", "banned"}} {
		if n := rejected(t, f.reg, r.layer, r.reason); n != 1 {
			t.Errorf("rejected{%s,%s} = %v, want 1", r.layer, r.reason, n)
		}
	}

	// The audit trail holds all four, with their decisions.
	clk.Advance(2 * time.Minute)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var recs []audit.Record
	if err := audit.Read(ctx, trail, audit.Query{Room: room}, func(r audit.Record) error { recs = append(recs, r); return nil }, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"u1": "stored", "u2": "dropped:duplicate", "u3": "masked:sensitive_word", "u4": "dropped:banned"}
	if len(recs) != len(want) {
		t.Fatalf("audit records %+v, want %d", recs, len(want))
	}
	for _, r := range recs {
		d := string(r.Decision)
		if r.Reason != "" {
			d += ":" + r.Reason
		}
		if want[r.User] != d {
			t.Errorf("audit %s: %s, want %s", r.User, d, want[r.User])
		}
	}
}

// TestWordRefusePolicy: under "refuse" a listed word is answered 422
// sensitive_word and nothing is stored.
func TestWordRefusePolicy(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Words, c.WordPolicy = StaticWords{"spam"}, WordsRefuse })
	rec := f.do(http.MethodPost, barragePath(room), f.token(t, room, "u1", auth.RoleViewer), `{"text":"spam"}`)
	if rec.Code != http.StatusUnprocessableEntity || errorCode(t, rec) != "sensitive_word" {
		t.Fatalf("%d %s, want 422 sensitive_word", rec.Code, rec.Body)
	}
	if n := len(f.entries(t, room, stream.Barrage)); n != 0 {
		t.Fatalf("stored %d", n)
	}
}

// TestGlobalLimitThroughBarrage: the event's global limit, in the order
// the server runs the anti-spam checks — a banned user's comment takes no
// global token; comments over the limit are dropped (global_limit) and are
// not remembered as duplicates, so the same text passes once the bucket
// refills; a masked copy of a stored text is a duplicate.
func TestGlobalLimitThroughBarrage(t *testing.T) {
	clk := clock.NewFake(t0)
	bans := NewMemoryBanStore()
	ev := event.Event{ID: "show", Start: t0.Add(-time.Minute), End: t0.Add(time.Hour),
		Rooms: []event.Room{{ID: room, Limits: &event.Limits{EventRefill: 3}}}}
	dir, err := event.DirectoryOf(clk, ev)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, clk, stream.NewMemoryStore(clk), func(c *Config) {
		c.Bans, c.Events = bans, dir
		c.Global = NewMemoryGlobalLimiter(clk)
		c.Words = StaticWords{"spam"}
		c.UserCapacity = 100
	})
	ctx := context.Background()
	if err := bans.Put(ctx, Ban{User: "troll", At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Bans().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	viewer := func(u string) string { return f.token(t, room, u, auth.RoleViewer) }

	f.barrage(t, viewer("troll"), "first!") // banned: takes no token
	f.barrage(t, viewer("u1"), "hello")
	f.barrage(t, viewer("u2"), "buy spam")
	f.barrage(t, viewer("u3"), "BUY SPAM") // a copy once folded: a duplicate, though it took a token
	f.barrage(t, viewer("u4"), "over the limit")
	clk.Advance(time.Second) // the bucket refills
	f.barrage(t, viewer("u5"), "over the limit")
	got := f.entries(t, room, stream.Barrage)
	var texts []string
	for _, m := range got {
		texts = append(texts, m.Text)
	}
	if want := []string{"hello", "buy ****", "over the limit"}; !slices.Equal(texts, want) {
		t.Fatalf("stored %q, want %q", texts, want)
	}
	for _, r := range []struct {
		reason string
		n      float64
	}{{"banned", 1}, {"global_limit", 1}, {"duplicate", 1}} {
		if n := rejected(t, f.reg, "antispam", r.reason); n != r.n {
			t.Errorf("rejected{antispam,%s} = %v, want %v", r.reason, n, r.n)
		}
	}
}
