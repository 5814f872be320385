package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/sdk/wire"
)

// reportEnv is one ReportStore under test. Times of reports are the
// caller's: base is a time the store's expiry judge (the fake clock, or
// Redis's own) takes for now; pass moves the memory store's clock (nil on
// Redis, whose expiry is checked by the keys' expiry times instead).
type reportEnv struct {
	store ingest.ReportStore
	base  time.Time
	pass  func(time.Duration)
	rdb   redis.UniversalClient
}

func reportBackends(b ingest.ReportBounds) []struct {
	name string
	open func(t *testing.T) reportEnv
} {
	onRedis := func(t *testing.T, rdb redis.UniversalClient) reportEnv {
		return reportEnv{store: ingest.NewRedisReportStore(rdb, b), base: time.Now().Truncate(time.Millisecond), rdb: rdb}
	}
	return []struct {
		name string
		open func(t *testing.T) reportEnv
	}{
		{"memory", func(t *testing.T) reportEnv {
			c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			return reportEnv{store: ingest.NewMemoryReportStore(b, c), base: c.Now(), pass: c.Advance}
		}},
		{"redis", func(t *testing.T) reportEnv { return onRedis(t, redistest.Client(t)) }},
		{"redis-cluster", func(t *testing.T) reportEnv { return onRedis(t, redistest.Cluster(t)) }},
	}
}

// msgID is the id of the i-th message of a test, at base's time.
func (e reportEnv) msgID(i int) string { return wire.FormatID(e.base.UnixMilli(), uint64(i)) }

func (e reportEnv) report(t *testing.T, room string, i int, reporter, reason string, at time.Duration) ingest.ReportAdded {
	t.Helper()
	r := ingest.Report{Room: room, Message: ingest.ReportedMessage{ID: e.msgID(i), Kind: wire.KindBarrage, User: fmt.Sprintf("sender-%d", i), Text: "bad words", Known: true},
		Reporter: reporter, Reason: reason, At: e.base.Add(at), Expires: e.base.Add(time.Hour)}
	got, err := e.store.Add(context.Background(), r)
	if err != nil {
		t.Fatalf("Add(%s, %d, %s): %v", room, i, reporter, err)
	}
	return got
}

func (e reportEnv) top(t *testing.T, room string, n int) []ingest.ReportItem {
	t.Helper()
	items, err := e.store.Top(context.Background(), room, n)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func TestReportStoreDedup(t *testing.T) {
	for _, b := range reportBackends(ingest.ReportBounds{}) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			if got := e.report(t, "r1", 1, "alice", ingest.ReportSpam, 0); got.Duplicate {
				t.Fatal("first report: duplicate")
			}
			if got := e.report(t, "r1", 1, "alice", ingest.ReportAbuse, time.Second); !got.Duplicate {
				t.Fatal("the same user again: not a duplicate")
			}
			e.report(t, "r1", 1, "bob", ingest.ReportAbuse, 2*time.Second)
			// Another message of the same user counts for that message.
			e.report(t, "r1", 2, "alice", ingest.ReportSpam, 0)
			items := e.top(t, "r1", 10)
			if len(items) != 2 {
				t.Fatalf("%d items, want 2: %+v", len(items), items)
			}
			it := items[0]
			if it.ID != e.msgID(1) || it.Count != 2 || it.Reasons[ingest.ReportSpam] != 1 || it.Reasons[ingest.ReportAbuse] != 1 {
				t.Fatalf("top item %+v: want message 1 counted twice, one spam, one abuse (the duplicate's reason not counted)", it)
			}
			if !it.First.Equal(e.base) || !it.Last.Equal(e.base.Add(2*time.Second)) {
				t.Fatalf("first %v last %v, want %v and 2 s later", it.First, it.Last, e.base)
			}
			if it.User != "sender-1" || it.Text != "bad words" || !it.Known || it.Decision != nil {
				t.Fatalf("item %+v: want the sender and text, known, undecided", it)
			}
		})
	}
}

func TestReportStoreOrdering(t *testing.T) {
	for _, b := range reportBackends(ingest.ReportBounds{}) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			counts := map[int]int{1: 3, 2: 1, 3: 5, 4: 1, 5: 3}
			for i, n := range counts {
				for u := range n {
					e.report(t, "r1", i, fmt.Sprintf("u%d", u), ingest.ReportOther, 0)
				}
			}
			// Most reported first; ties: the later id first.
			want := []int{3, 5, 1, 4, 2}
			items := e.top(t, "r1", 10)
			if len(items) != len(want) {
				t.Fatalf("%d items, want %d", len(items), len(want))
			}
			for k, i := range want {
				if items[k].ID != e.msgID(i) || items[k].Count != int64(counts[i]) {
					t.Fatalf("item %d: %s ×%d, want %s ×%d", k, items[k].ID, items[k].Count, e.msgID(i), counts[i])
				}
			}
			if got := e.top(t, "r1", 2); len(got) != 2 || got[1].ID != e.msgID(5) {
				t.Fatalf("top 2: %+v", got)
			}
			if got := e.top(t, "other", 5); len(got) != 0 {
				t.Fatalf("a room without reports: %+v", got)
			}
		})
	}
}

func TestReportStoreBounds(t *testing.T) {
	for _, b := range reportBackends(ingest.ReportBounds{Messages: 3, Reporters: 2}) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			e.report(t, "r1", 1, "a", ingest.ReportSpam, 0)
			e.report(t, "r1", 1, "b", ingest.ReportSpam, 0)
			if got := e.report(t, "r1", 1, "c", ingest.ReportSpam, 0); !got.Uncounted || got.Duplicate {
				t.Fatalf("a third reporter of a message holding two: %+v, want uncounted", got)
			}
			if got := e.report(t, "r1", 1, "a", ingest.ReportSpam, 0); !got.Duplicate {
				t.Fatalf("a remembered reporter again: %+v, want duplicate", got)
			}
			e.report(t, "r1", 2, "a", ingest.ReportSpam, 0)
			e.report(t, "r1", 3, "a", ingest.ReportSpam, 0)
			// The room is full: message 4 evicts the least reported with
			// the smallest id (2).
			if got := e.report(t, "r1", 4, "a", ingest.ReportSpam, 0); !got.Evicted {
				t.Fatalf("a fourth message in a room of three: %+v, want an eviction", got)
			}
			items := e.top(t, "r1", 10)
			var ids []string
			for _, it := range items {
				ids = append(ids, it.ID)
			}
			if len(items) != 3 || items[0].ID != e.msgID(1) || items[0].Count != 2 || items[1].ID != e.msgID(4) || items[2].ID != e.msgID(3) {
				t.Fatalf("items %v, want 1 (×2), 4, 3", ids)
			}
			if _, err := e.store.Get(context.Background(), "r1", wire.KindBarrage, e.msgID(2)); !errors.Is(err, ingest.ErrNoReport) {
				t.Fatalf("the evicted message: %v, want ErrNoReport", err)
			}
			// Its reporters went with it: a report of it again counts anew.
			if got := e.report(t, "r1", 2, "a", ingest.ReportSpam, 0); got.Duplicate {
				t.Fatal("a report of an evicted message is a duplicate")
			}
		})
	}
}

func TestReportStoreExpiry(t *testing.T) {
	for _, b := range reportBackends(ingest.ReportBounds{}) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			e.report(t, "r1", 1, "a", ingest.ReportSpam, 0) // expires base+1h
			if _, err := e.store.Decide(ctx, "r1", wire.KindBarrage, e.msgID(1), ingest.ReportDecision{Action: ingest.ActionDismiss, At: e.base}); err != nil {
				t.Fatal(err)
			}
			if e.pass != nil {
				e.pass(time.Hour - time.Millisecond)
				if len(e.top(t, "r1", 5)) != 1 {
					t.Fatal("the reports went before their expiry")
				}
				e.pass(time.Millisecond)
				if got := e.top(t, "r1", 5); len(got) != 0 {
					t.Fatalf("after the expiry: %+v", got)
				}
				if h, _ := e.store.History(ctx, "r1", "sender-1"); len(h) != 0 {
					t.Fatalf("history after the expiry: %+v", h)
				}
				return
			}
			// Redis: every key of the room expires at the event's end.
			want := e.base.Add(time.Hour).UnixMilli()
			item := redisx.RoomKey("r1", "report:1:"+e.msgID(1))
			for _, k := range []string{redisx.RoomKey("r1", "reports"), item, item + ":by", redisx.RoomKey("r1", "reportsof:sender-1")} {
				got, err := e.rdb.PExpireTime(ctx, k).Result()
				if err != nil || got.Milliseconds() != want {
					t.Fatalf("%s expires at %v (%v), want %d", k, got, err, want)
				}
			}
			// A room whose expiry has passed keeps nothing.
			r := ingest.Report{Room: "r2", Message: ingest.ReportedMessage{ID: e.msgID(1), Kind: wire.KindBarrage}, Reporter: "a", Reason: ingest.ReportSpam,
				At: e.base.Add(-2 * time.Hour), Expires: e.base.Add(-time.Hour)}
			if _, err := e.store.Add(ctx, r); err != nil {
				t.Fatal(err)
			}
			if got := e.top(t, "r2", 5); len(got) != 0 {
				t.Fatalf("an expired room: %+v", got)
			}
		})
	}
}

func TestReportStoreDecide(t *testing.T) {
	for _, b := range reportBackends(ingest.ReportBounds{History: 2}) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			for i := 1; i <= 3; i++ {
				r := ingest.Report{Room: "r1", Message: ingest.ReportedMessage{ID: e.msgID(i), Kind: wire.KindBarrage, User: "spammer", Text: fmt.Sprint("t", i), Known: true},
					Reporter: "a", Reason: ingest.ReportSpam, At: e.base, Expires: e.base.Add(time.Hour)}
				if _, err := e.store.Add(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			decide := func(i int, action string, at time.Duration) ingest.ReportItem {
				t.Helper()
				it, err := e.store.Decide(ctx, "r1", wire.KindBarrage, e.msgID(i), ingest.ReportDecision{Action: action, By: "mod", Reason: "seen", At: e.base.Add(at)})
				if err != nil {
					t.Fatalf("Decide(%d, %s): %v", i, action, err)
				}
				return it
			}
			it := decide(1, ingest.ActionDismiss, time.Second)
			if d := it.Decision; d == nil || d.Action != ingest.ActionDismiss || d.By != "mod" || !d.At.Equal(e.base.Add(time.Second)) || d.ID != e.msgID(1) {
				t.Fatalf("decision %+v", it.Decision)
			}
			// The same action again (a retry): nothing new.
			if it := decide(1, ingest.ActionDismiss, 5*time.Second); !it.Decision.At.Equal(e.base.Add(time.Second)) {
				t.Fatalf("a retried decision replaced the first: %+v", it.Decision)
			}
			decide(1, ingest.ActionTakedown, 2*time.Second)
			decide(2, ingest.ActionBan, 3*time.Second)
			h, err := e.store.History(ctx, "r1", "spammer")
			if err != nil {
				t.Fatal(err)
			}
			// Bounded to 2, the latest first.
			if len(h) != 2 || h[0].Action != ingest.ActionBan || h[0].ID != e.msgID(2) || h[1].Action != ingest.ActionTakedown {
				t.Fatalf("history %+v: want ban of 2, then takedown of 1", h)
			}
			if _, err := e.store.Decide(ctx, "r1", wire.KindBarrage, e.msgID(9), ingest.ReportDecision{Action: ingest.ActionDismiss, At: e.base}); !errors.Is(err, ingest.ErrNoReport) {
				t.Fatalf("an unreported message: %v, want ErrNoReport", err)
			}
			if _, err := e.store.Decide(ctx, "r1", wire.KindBarrage, e.msgID(3), ingest.ReportDecision{Action: "shrug", At: e.base}); !errors.Is(err, ingest.ErrBadReport) {
				t.Fatalf("an unknown action: %v, want ErrBadReport", err)
			}
		})
	}
}

func TestReportStoreLearnsTheMessage(t *testing.T) {
	for _, b := range reportBackends(ingest.ReportBounds{}) {
		t.Run(b.name, func(t *testing.T) {
			e := b.open(t)
			ctx := context.Background()
			r := ingest.Report{Room: "r1", Message: ingest.ReportedMessage{ID: e.msgID(1), Kind: wire.KindGift}, Reporter: "a", Reason: ingest.ReportOther,
				At: e.base, Expires: e.base.Add(time.Hour)}
			if _, err := e.store.Add(ctx, r); err != nil {
				t.Fatal(err)
			}
			it, err := e.store.Get(ctx, "r1", wire.KindGift, e.msgID(1))
			if err != nil || it.Known || it.User != "" || it.Kind != wire.KindGift {
				t.Fatalf("%+v, %v: want an unknown gift", it, err)
			}
			// The same id in the barrage lane is another message.
			if _, err := e.store.Get(ctx, "r1", wire.KindBarrage, e.msgID(1)); !errors.Is(err, ingest.ErrNoReport) {
				t.Fatalf("barrage lane: %v", err)
			}
			r.Reporter, r.Message.User, r.Message.Text, r.Message.Known = "b", "giver", "", true
			if _, err := e.store.Add(ctx, r); err != nil {
				t.Fatal(err)
			}
			if it, _ := e.store.Get(ctx, "r1", wire.KindGift, e.msgID(1)); !it.Known || it.User != "giver" || it.Count != 2 {
				t.Fatalf("%+v: want the sender learnt from the second report", it)
			}
		})
	}
}

func TestReportValidate(t *testing.T) {
	ok := ingest.Report{Room: "r1", Message: ingest.ReportedMessage{ID: "1700000000000-0", Kind: wire.KindBarrage}, Reporter: "a", Reason: ingest.ReportSpam,
		At: time.Unix(1, 0), Expires: time.Unix(2, 0)}
	for name, mod := range map[string]func(*ingest.Report){
		"room":      func(r *ingest.Report) { r.Room = "a.b" },
		"kind 0":    func(r *ingest.Report) { r.Message.Kind = 0 },
		"kind 4":    func(r *ingest.Report) { r.Message.Kind = 4 },
		"id":        func(r *ingest.Report) { r.Message.ID = "x" },
		"id +":      func(r *ingest.Report) { r.Message.ID = "+1-0" },
		"id 0":      func(r *ingest.Report) { r.Message.ID = "0-0" },
		"id zeros":  func(r *ingest.Report) { r.Message.ID = "01-0" },
		"reason":    func(r *ingest.Report) { r.Reason = "boring" },
		"reporter":  func(r *ingest.Report) { r.Reporter = "" },
		"expires":   func(r *ingest.Report) { r.Expires = r.At },
		"no reason": func(r *ingest.Report) { r.Reason = "" },
	} {
		r := ok
		mod(&r)
		if err := r.Validate(); !errors.Is(err, ingest.ErrBadReport) {
			t.Errorf("%s: %v, want ErrBadReport", name, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
