package ingest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
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
