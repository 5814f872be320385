package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

func reportPath(rm string) string { return "/v1/rooms/" + rm + "/reports" }

func reportJSON(id string, k int, reason string) string {
	b, _ := json.Marshal(map[string]any{"id": id, "k": k, "reason": reason})
	return string(b)
}

// appendComment stores a comment of user in rm's barrage stream and
// returns its id.
func (f *fixture) appendComment(t *testing.T, rm, user, text string) string {
	t.Helper()
	got, err := f.store.Append(context.Background(), stream.Key{Room: rm, Lane: stream.Barrage}, []wire.Message{{Kind: wire.KindBarrage, User: user, Nick: "n", Text: text}})
	if err != nil {
		t.Fatal(err)
	}
	return got[0].ID
}

func TestReportUpload(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	id := f.appendComment(t, room, "troll", "buy followers")
	viewer := func(u string) string { return f.token(t, room, u, auth.RoleViewer) }

	rec := f.do(http.MethodPost, reportPath(room), viewer("alice"), reportJSON(id, 1, "spam"))
	if rec.Code != http.StatusAccepted || strings.TrimSpace(rec.Body.String()) != `{"ok":true}` {
		t.Fatalf("report: %d %s", rec.Code, rec.Body)
	}
	rec = f.do(http.MethodPost, reportPath(room), viewer("alice"), reportJSON(id, 1, "abuse"))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"duplicate":true,"ok":true}` {
		t.Fatalf("the same report again: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(http.MethodPost, reportPath(room), viewer("bob"), reportJSON(id, 1, "abuse")); rec.Code != http.StatusAccepted {
		t.Fatalf("another user: %d %s", rec.Code, rec.Body)
	}
	it, err := f.srv.ReportStore().Get(ctx, room, wire.KindBarrage, id)
	if err != nil {
		t.Fatal(err)
	}
	if it.Count != 2 || !it.Known || it.User != "troll" || it.Text != "buy followers" || !it.First.Equal(t0) {
		t.Fatalf("item %+v: want two reports of troll's comment, looked up in the stream", it)
	}
	// A message the stream no longer holds (or never held): kept, unknown.
	gone := wire.FormatID(t0.Add(-time.Hour).UnixMilli(), 0)
	if rec := f.do(http.MethodPost, reportPath(room), viewer("alice"), reportJSON(gone, 1, "other")); rec.Code != http.StatusAccepted {
		t.Fatalf("report of a trimmed message: %d %s", rec.Code, rec.Body)
	}
	if it, err := f.srv.ReportStore().Get(ctx, room, wire.KindBarrage, gone); err != nil || it.Known || it.User != "" {
		t.Fatalf("%+v, %v: want an unknown message", it, err)
	}
	// The id of a barrage comment is not a live-lane message.
	if rec := f.do(http.MethodPost, reportPath(room), viewer("carol"), reportJSON(id, 2, "other")); rec.Code != http.StatusAccepted {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if it, _ := f.srv.ReportStore().Get(ctx, room, wire.KindGift, id); it.Known {
		t.Fatalf("the barrage comment was taken for the gift of the same id: %+v", it)
	}
	for result, want := range map[string]float64{"counted": 4, "duplicate": 1} {
		if got := metric(t, f.reg, "danmaku_ingest_reports_total", map[string]string{"result": result}); got != want {
			t.Errorf("reports_total{%s} = %v, want %v", result, got, want)
		}
	}
}

func TestReportBadInput(t *testing.T) {
	f := newFixture(t, nil)
	id := f.appendComment(t, room, "troll", "x")
	viewer := f.token(t, room, "alice", auth.RoleViewer)
	for name, tc := range map[string]struct {
		path, token, body string
		status            int
		code              string
	}{
		"no token":   {reportPath(room), "", reportJSON(id, 1, "spam"), 401, "no_token"},
		"other room": {reportPath("room-2"), viewer, reportJSON(id, 1, "spam"), 403, "wrong_room"},
		"bad json":   {reportPath(room), viewer, `{"id":`, 400, "bad_json"},
		"no id":      {reportPath(room), viewer, `{"k":1,"reason":"spam"}`, 400, "bad_report"},
		"no k":       {reportPath(room), viewer, `{"id":"` + id + `","reason":"spam"}`, 400, "bad_report"},
		"bad k":      {reportPath(room), viewer, reportJSON(id, 7, "spam"), 400, "bad_report"},
		"huge k":     {reportPath(room), viewer, reportJSON(id, 257, "spam"), 400, "bad_report"},
		"bad id":     {reportPath(room), viewer, reportJSON("yesterday", 1, "spam"), 400, "bad_report"},
		"bad reason": {reportPath(room), viewer, reportJSON(id, 1, "boring"), 400, "bad_report"},
		"no reason":  {reportPath(room), viewer, `{"id":"` + id + `","k":1}`, 400, "bad_report"},
	} {
		t.Run(name, func(t *testing.T) {
			rec := f.do(http.MethodPost, tc.path, tc.token, tc.body)
			if rec.Code != tc.status || errorCode(t, rec) != tc.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
		})
	}
	if !slices.Contains(BrowserRoutes, "/v1/rooms/:room/reports") {
		t.Error("reports are not a browser route (no CORS)")
	}
}

// TestReportRate: a user's allowance is a bucket on the injected clock.
func TestReportRate(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ReportBurst, c.ReportEvery = 2, 10*time.Second })
	viewer := f.token(t, room, "alice", auth.RoleViewer)
	report := func(i int) *httptest.ResponseRecorder {
		return f.do(http.MethodPost, reportPath(room), viewer, reportJSON(wire.FormatID(t0.UnixMilli(), uint64(i)), 1, "spam"))
	}
	for i := range 2 {
		if rec := report(i); rec.Code != http.StatusAccepted {
			t.Fatalf("report %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := report(2)
	if rec.Code != http.StatusTooManyRequests || errorCode(t, rec) != "report_rate" || rec.Header().Get("Retry-After") != "10" {
		t.Fatalf("over the allowance: %d %s Retry-After %q", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	// Another user has an allowance of their own.
	if rec := f.do(http.MethodPost, reportPath(room), f.token(t, room, "bob", auth.RoleViewer), reportJSON(wire.FormatID(t0.UnixMilli(), 9), 1, "spam")); rec.Code != http.StatusAccepted {
		t.Fatalf("another user: %d %s", rec.Code, rec.Body)
	}
	f.clk.Advance(10*time.Second - time.Millisecond)
	if rec := report(2); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("just before the refill: %d", rec.Code)
	}
	f.clk.Advance(time.Millisecond)
	if rec := report(2); rec.Code != http.StatusAccepted {
		t.Fatalf("after the refill: %d %s", rec.Code, rec.Body)
	}
	if got := metric(t, f.reg, "danmaku_ingest_reports_total", map[string]string{"result": "rate"}); got != 2 {
		t.Errorf("reports_total{rate} = %v, want 2", got)
	}
}

// reviewFixture is an ingest node with the review API beside it.
type reviewFixture struct {
	*fixture
	bans      *MemoryBanStore
	trail     *objstore.MemoryStore
	rec       *audit.Recorder
	takedowns []string
	changed   int
}

const reviewOpKey = "review-operator-key-0123456789"

func newReviewFixture(t *testing.T, takedown bool) *reviewFixture {
	t.Helper()
	r := &reviewFixture{bans: NewMemoryBanStore(), trail: objstore.NewMemoryStore()}
	r.fixture = newFixture(t, func(c *Config) { c.Bans = r.bans })
	var err error
	if r.rec, err = audit.New(audit.Config{Store: r.trail, Node: "n1", Clock: r.clk, Logger: discard}); err != nil {
		t.Fatal(err)
	}
	api := &ReportAPI{Store: r.srv.ReportStore(), Bans: r.bans, Keys: []string{reviewOpKey}, Hosts: r.ring, Addr: selfAddr, Clock: r.clk, Audit: r.rec,
		BansChanged: func(context.Context) { r.changed++ }, Logger: discard}
	if takedown {
		api.Takedown = func(_ context.Context, rm string, k wire.Kind, id, by, reason string) error {
			r.takedowns = append(r.takedowns, strings.Join([]string{rm, k.String(), id, by, reason}, " "))
			return nil
		}
	}
	api.Register(r.engine)
	return r
}

func (r *reviewFixture) reportAs(t *testing.T, user, id string) {
	t.Helper()
	if rec := r.do(http.MethodPost, reportPath(room), r.token(t, room, user, auth.RoleViewer), reportJSON(id, 1, "abuse")); rec.Code != http.StatusAccepted {
		t.Fatalf("report: %d %s", rec.Code, rec.Body)
	}
}

type reviewList struct {
	Reports []ReviewItem `json:"reports"`
}

func (r *reviewFixture) list(t *testing.T, rm, key, query string) reviewList {
	t.Helper()
	rec := r.do(http.MethodGet, "/v1/admin/rooms/"+rm+"/reports"+query, key, "")
	var out reviewList
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	return out
}

func (r *reviewFixture) decide(t *testing.T, id, action, key, body string, want int) ReviewItem {
	t.Helper()
	rec := r.do(http.MethodPost, "/v1/admin/rooms/"+room+"/reports/"+id+"/"+action, key, body)
	if rec.Code != want {
		t.Fatalf("%s %s: %d %s, want %d", action, id, rec.Code, rec.Body, want)
	}
	var out struct {
		Report ReviewItem `json:"report"`
	}
	if want == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
	}
	return out.Report
}

// TestReviewAuth: an operator key, or the host's or an admin's token of
// this room; a host of another room is refused.
func TestReviewAuth(t *testing.T) {
	r := newReviewFixture(t, true)
	id := r.appendComment(t, room, "troll", "x")
	r.reportAs(t, "alice", id)
	list := "/v1/admin/rooms/" + room + "/reports"
	dismiss := list + "/" + id + "/dismiss"
	for name, tc := range map[string]struct {
		token  string
		status int
		code   string
	}{
		"no credential":      {"", 401, "bad_operator_key"},
		"junk":               {"junk", 401, "bad_operator_key"},
		"viewer of the room": {r.token(t, room, "v", auth.RoleViewer), 403, "forbidden"},
		"host of room B":     {r.token(t, "room-b", "hostb", auth.RoleHost), 403, "forbidden"},
		"admin of room B":    {r.token(t, "room-b", "adminb", auth.RoleAdmin), 403, "forbidden"},
		"host, other node":   {r.token(t, room, "host", auth.RoleHost, "http://ingest-9"), 403, "wrong_node"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, m := range []struct{ method, path string }{{"GET", list}, {"POST", dismiss}} {
				rec := r.do(m.method, m.path, tc.token, "")
				if rec.Code != tc.status || errorCode(t, rec) != tc.code {
					t.Fatalf("%s %s: %d %s, want %d %s", m.method, m.path, rec.Code, rec.Body, tc.status, tc.code)
				}
			}
		})
	}
	if it, _ := r.srv.ReportStore().Get(context.Background(), room, wire.KindBarrage, id); it.Decision != nil {
		t.Fatalf("a refused caller decided: %+v", it.Decision)
	}
	r.list(t, room, reviewOpKey, "")
	r.list(t, room, r.token(t, room, "host", auth.RoleHost), "")
	it := r.decide(t, id, ActionDismiss, r.token(t, room, "admin", auth.RoleAdmin), "", http.StatusOK)
	if it.Decision == nil || it.Decision.By != "admin" {
		t.Fatalf("decision %+v: want by admin", it.Decision)
	}
}

// TestReviewQueue: the most reported first, with the sender's bans and
// earlier decisions; each action recorded and audited.
func TestReviewQueue(t *testing.T) {
	r := newReviewFixture(t, true)
	ctx := context.Background()
	a := r.appendComment(t, room, "troll", "first")
	b := r.appendComment(t, room, "troll", "second")
	c := r.appendComment(t, room, "rude", "third")
	for _, u := range []string{"u1", "u2", "u3"} {
		r.reportAs(t, u, b)
	}
	for _, u := range []string{"u1", "u2"} {
		r.reportAs(t, u, c)
	}
	r.reportAs(t, "u1", a)
	if err := r.bans.Put(ctx, Ban{User: "rude", Room: "room-9", At: t0, Reason: "earlier"}); err != nil {
		t.Fatal(err)
	}

	got := r.list(t, room, reviewOpKey, "?n=2")
	if len(got.Reports) != 2 || got.Reports[0].ID != b || got.Reports[0].Count != 3 || got.Reports[1].ID != c {
		t.Fatalf("top 2: %+v, want b (3) then c (2)", got.Reports)
	}
	if rc := got.Reports[1]; len(rc.Bans) != 1 || rc.Bans[0].Reason != "earlier" || rc.Text != "third" || rc.User != "rude" || rc.Reasons["abuse"] != 2 {
		t.Fatalf("c: %+v, want rude's ban in force and text", rc)
	}
	for _, q := range []string{"?n=0", "?n=201", "?n=x"} {
		if rec := r.do("GET", "/v1/admin/rooms/"+room+"/reports"+q, reviewOpKey, ""); rec.Code != 400 || errorCode(t, rec) != "bad_count" {
			t.Fatalf("%s: %d %s", q, rec.Code, rec.Body)
		}
	}

	host := r.token(t, room, "host", auth.RoleHost)
	// dismiss
	it := r.decide(t, a, ActionDismiss, host, `{"reason":"fine"}`, http.StatusOK)
	if it.Decision == nil || it.Decision.Action != ActionDismiss || it.Decision.Reason != "fine" || it.Decision.By != "host" {
		t.Fatalf("dismiss: %+v", it.Decision)
	}
	// takedown
	it = r.decide(t, b, ActionTakedown, host, `{"k":1,"reason":"spam link"}`, http.StatusOK)
	if len(r.takedowns) != 1 || r.takedowns[0] != room+" barrage "+b+" host spam link" || it.Decision.Action != ActionTakedown {
		t.Fatalf("takedown: %v %+v", r.takedowns, it.Decision)
	}
	// ban: a host bans from this room only
	if rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/"+c+"/ban", host, `{"scope":"all"}`); rec.Code != 403 || errorCode(t, rec) != "forbidden" {
		t.Fatalf("a host's ban of every room: %d %s", rec.Code, rec.Body)
	}
	if rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/"+c+"/ban", host, `{"ttl_seconds":-1}`); rec.Code != 400 || errorCode(t, rec) != "bad_ban" {
		t.Fatalf("a bad duration: %d %s", rec.Code, rec.Body)
	}
	it = r.decide(t, c, ActionBan, host, `{"ttl_seconds":600,"reason":"slurs"}`, http.StatusOK)
	bans, _ := r.bans.User(ctx, "rude")
	var here *Ban
	for i := range bans {
		if bans[i].Room == room {
			here = &bans[i]
		}
	}
	if here == nil || !here.Until.Equal(t0.Add(10*time.Minute)) || here.Reason != "slurs" || r.changed != 1 {
		t.Fatalf("bans %+v (changed %d): want rude banned from %s for 10 minutes", bans, r.changed, room)
	}
	if it.Decision.Ban == nil || len(it.Bans) != 2 || len(it.History) != 1 || it.History[0].Action != ActionBan {
		t.Fatalf("ban answer %+v: want the ban, both bans in force, the decision in the history", it)
	}
	// An operator may ban from every room.
	r.decide(t, c, ActionBan, reviewOpKey, `{"scope":"all"}`, http.StatusOK)
	if bans, _ := r.bans.User(ctx, "rude"); len(bans) != 3 {
		t.Fatalf("bans %+v: want the every-room ban too", bans)
	}
	// The queue now shows troll's history beside the taken-down message.
	got = r.list(t, room, reviewOpKey, "")
	if len(got.Reports) != 3 || got.Reports[0].Decision == nil || len(got.Reports[0].History) != 2 {
		t.Fatalf("after the decisions: %+v", got.Reports)
	}

	// Errors.
	unknown := wire.FormatID(t0.UnixMilli()-5000, 0)
	if rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/"+unknown+"/dismiss", reviewOpKey, ""); rec.Code != 404 || errorCode(t, rec) != "no_such_report" {
		t.Fatalf("an unreported message: %d %s", rec.Code, rec.Body)
	}
	if rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/nope/dismiss", reviewOpKey, ""); rec.Code != 400 || errorCode(t, rec) != "bad_report" {
		t.Fatalf("a bad id: %d %s", rec.Code, rec.Body)
	}
	if rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/"+a+"/shrug", reviewOpKey, ""); rec.Code != 404 || errorCode(t, rec) != "not_found" {
		t.Fatalf("an unknown action: %d %s", rec.Code, rec.Body)
	}
	r.reportAs(t, "u1", unknown) // the stream never held it: no sender
	if rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/"+unknown+"/ban", reviewOpKey, ""); rec.Code != 409 || errorCode(t, rec) != "sender_unknown" {
		t.Fatalf("a ban of an unknown sender: %d %s", rec.Code, rec.Body)
	}

	// Every decision is in the audit trail, with who made it.
	r.clk.Advance(2 * time.Minute)
	if err := r.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var recs []string
	if err := audit.Read(ctx, r.trail, audit.Query{Room: room}, func(x audit.Record) error {
		if x.Decision == audit.Reviewed {
			recs = append(recs, x.Reason+" "+x.ID+" "+x.User+" "+x.By)
		}
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"report_dismiss " + a + " troll host", "report_takedown " + b + " troll host", "report_ban " + c + " rude host", "report_ban " + c + " rude "}
	if !slices.Equal(recs, want) {
		t.Fatalf("audited %q, want %q", recs, want)
	}
}

func TestReviewTakedownUnavailable(t *testing.T) {
	r := newReviewFixture(t, false)
	id := r.appendComment(t, room, "troll", "x")
	r.reportAs(t, "alice", id)
	rec := r.do("POST", "/v1/admin/rooms/"+room+"/reports/"+id+"/takedown", reviewOpKey, "")
	if rec.Code != http.StatusNotImplemented || errorCode(t, rec) != "takedown_unavailable" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// TestReviewTakedownThroughServer: the review's takedown is the node's
// TakeDown: recorded, published on the live lane, and the report decided.
func TestReviewTakedownThroughServer(t *testing.T) {
	r := newReviewFixture(t, false)
	api := &ReportAPI{Store: r.srv.ReportStore(), Bans: r.bans, Keys: []string{reviewOpKey}, Hosts: r.ring, Addr: selfAddr, Clock: r.clk,
		Takedown: r.srv.ReviewTakedown(), Logger: discard}
	api.Register(r.engine.Group("/other"))
	id := r.appendComment(t, room, "troll", "x")
	r.reportAs(t, "alice", id)
	rec := r.do("POST", "/other/v1/admin/rooms/"+room+"/reports/"+id+"/takedown", reviewOpKey, `{"reason":"spam"}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	td, ok, _, err := r.srv.cfg.Takedowns.Lookup(context.Background(), room, id, wire.KindBarrage)
	if err != nil || !ok || td.By != takedownByOperator || td.Reason != "spam" {
		t.Fatalf("takedown %+v %v %v: want it recorded, by the operator", td, ok, err)
	}
	live := r.entries(t, room, stream.Live)
	if len(live) != 1 || len(live[0].TakenDown) != 1 || live[0].TakenDown[0].ID != id {
		t.Fatalf("live lane %+v: want the takedown published", live)
	}
	if it, _ := r.srv.ReportStore().Get(context.Background(), room, wire.KindBarrage, id); it.Decision == nil || it.Decision.Action != ActionTakedown {
		t.Fatalf("decision %+v", it.Decision)
	}
}
