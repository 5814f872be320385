package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

const takedownOpKey = "takedown-operator-key-0123456789"

// takedownFixture is an ingest node with the takedown API beside it, rooms
// "room-1" and "room-2" live, "later" not yet, and an audit trail to read.
type takedownFixture struct {
	*fixture
	trail *objstore.MemoryStore
	rec   *audit.Recorder
}

func newTakedownFixture(t *testing.T) *takedownFixture {
	t.Helper()
	clk := clock.NewFake(t0)
	trail := objstore.NewMemoryStore()
	rec, err := audit.New(audit.Config{Store: trail, Node: "n1", Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := event.DirectoryOf(clk,
		event.Event{ID: "ev", Start: t0.Add(-time.Minute), End: t0.Add(time.Hour), Rooms: []event.Room{{ID: room}, {ID: "room-2"}}},
		event.Event{ID: "ev2", Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), Rooms: []event.Room{{ID: "later"}}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, clk, stream.NewMemoryStore(clk), func(c *Config) { c.Audit, c.Events = rec, dir })
	(&TakedownAPI{Server: f.srv, Keys: []string{takedownOpKey}, Hosts: f.ring, Addr: selfAddr, Logger: discard}).Register(f.engine)
	return &takedownFixture{fixture: f, trail: trail, rec: rec}
}

func takedownsPath(rm string) string { return "/v1/admin/rooms/" + rm + "/takedowns" }

func TestTakedownAPI(t *testing.T) {
	f := newTakedownFixture(t)
	host := f.token(t, room, "alice", auth.RoleHost)
	body := `{"id":"1893456000000-3","k":1,"reason":"  spam\u0007 link "}`

	rec := f.do("POST", takedownsPath(room), host, body)
	if rec.Code != http.StatusCreated {
		t.Fatalf("takedown: %d %s", rec.Code, rec.Body)
	}
	var got struct {
		Takedown Takedown `json:"takedown"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := Takedown{ID: "1893456000000-3", Kind: wire.KindBarrage, By: "alice", Reason: "spam link", AtMs: t0.UnixMilli()}
	if got.Takedown != want {
		t.Fatalf("takedown %+v, want %+v", got.Takedown, want)
	}
	// The live lane carries it, once.
	live := f.entries(t, room, stream.Live)
	if len(live) != 1 || !live[0].IsTakedown() || live[0].TakenDown[0] != (wire.TakenDown{ID: want.ID, Kind: want.Kind}) {
		t.Fatalf("live lane %+v, want the takedown entry", live)
	}

	// Again, by an operator, later: 200 with the first record; nothing
	// more on the lane.
	f.clk.Advance(time.Second)
	rec = f.do("POST", takedownsPath(room), takedownOpKey, `{"id":"1893456000000-3","k":1,"reason":"again"}`)
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || got.Takedown != want {
		t.Fatalf("repeat: %d %s, want 200 with the first", rec.Code, rec.Body)
	}
	if n := len(f.entries(t, room, stream.Live)); n != 1 {
		t.Fatalf("live lane holds %d entries after a repeat, want 1", n)
	}
	// The same id in the other lane is another message.
	rec = f.do("POST", takedownsPath(room), takedownOpKey, `{"id":"1893456000000-3","k":2}`)
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"by":"operator"`) {
		t.Fatalf("gift of the same id: %d %s", rec.Code, rec.Body)
	}

	rec = f.do("GET", takedownsPath(room), host, "")
	var list struct {
		Takedowns []Takedown `json:"takedowns"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || rec.Code != 200 || len(list.Takedowns) != 2 || list.Takedowns[0] != want {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("GET", takedownsPath("room-2"), takedownOpKey, ""); rec.Code != 200 || rec.Body.String() != `{"takedowns":[]}` {
		t.Fatalf("empty list: %d %s", rec.Code, rec.Body)
	}

	// Audited: who, when, why.
	f.clk.Advance(2 * time.Minute)
	if err := f.rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var recs []audit.Record
	if err := audit.Read(context.Background(), f.trail, audit.Query{Room: room}, func(r audit.Record) error { recs = append(recs, r); return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Decision != audit.TakenDown || recs[0].User != "alice" || recs[0].Text != "spam link" ||
		recs[0].ID != want.ID || recs[0].Reason != "barrage" || !recs[0].At.Equal(t0) {
		t.Fatalf("audit %+v", recs)
	}
}

func TestTakedownAPIRefuses(t *testing.T) {
	f := newTakedownFixture(t)
	ok := `{"id":"1893456000000-3","k":1}`
	tests := []struct {
		name, path, token, body string
		status                  int
		code                    string
	}{
		{"no credential", takedownsPath(room), "", ok, 401, "bad_operator_key"},
		{"junk", takedownsPath(room), "junk", ok, 401, "bad_operator_key"},
		{"viewer", takedownsPath(room), f.token(t, room, "bob", auth.RoleViewer), ok, 403, "forbidden"},
		{"host of another room", takedownsPath(room), f.token(t, "room-2", "carol", auth.RoleHost), ok, 403, "forbidden"},
		{"admin of another room", takedownsPath(room), f.token(t, "room-2", "carol", auth.RoleAdmin), ok, 403, "forbidden"},
		{"host of another room lists", takedownsPath(room), f.token(t, "room-2", "carol", auth.RoleHost), "", 403, "forbidden"},
		{"token for another node", takedownsPath(room), f.token(t, room, "alice", auth.RoleHost, "http://ingest-9"), ok, 403, "wrong_node"},
		{"no id", takedownsPath(room), takedownOpKey, `{"k":1}`, 400, "bad_takedown"},
		{"bad id", takedownsPath(room), takedownOpKey, `{"id":"12","k":1}`, 400, "bad_takedown"},
		{"no kind", takedownsPath(room), takedownOpKey, `{"id":"1-0"}`, 400, "bad_takedown"},
		{"unknown kind", takedownsPath(room), takedownOpKey, `{"id":"1-0","k":4}`, 400, "bad_takedown"},
		{"kind out of range", takedownsPath(room), takedownOpKey, `{"id":"1-0","k":300}`, 400, "bad_json"},
		{"kind as text", takedownsPath(room), takedownOpKey, `{"id":"1-0","k":"1"}`, 400, "bad_json"},
		{"unknown field", takedownsPath(room), takedownOpKey, `{"id":"1-0","k":1,"why":"x"}`, 400, "bad_json"},
		{"two values", takedownsPath(room), takedownOpKey, ok + ok, 400, "bad_json"},
		{"not utf-8", takedownsPath(room), takedownOpKey, "{\"id\":\"1-0\",\"k\":1,\"reason\":\"\xff\"}", 400, "bad_utf8"},
		{"long reason", takedownsPath(room), takedownOpKey, `{"id":"1-0","k":1,"reason":"` + strings.Repeat("长", 201) + `"}`, 400, "bad_takedown"},
		{"big body", takedownsPath(room), takedownOpKey, `{"id":"1-0","k":1,"reason":"` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large"},
		{"bad room", takedownsPath("a.b"), takedownOpKey, ok, 400, "bad_room"},
		{"bad room list", takedownsPath("a.b"), takedownOpKey, "", 400, "bad_room"},
		{"no such room", takedownsPath("nosuch"), takedownOpKey, ok, 404, "no_such_room"},
		{"room not live", takedownsPath("later"), takedownOpKey, ok, 409, "room_not_live"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := "POST"
			if tt.body == "" {
				method = "GET"
			}
			rec := f.do(method, tt.path, tt.token, tt.body)
			if rec.Code != tt.status || errorCode(t, rec) != tt.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
		})
	}
	if n := len(f.entries(t, room, stream.Live)); n != 0 {
		t.Fatalf("refused takedowns put %d entries on the live lane", n)
	}
}

// failingTakedowns is a TakedownStore whose every call fails.
type failingTakedowns struct{}

var errStoreDown = errors.New("store down")

func (failingTakedowns) Add(context.Context, string, Takedown, int, time.Time) (Takedown, bool, error) {
	return Takedown{}, false, errStoreDown
}
func (failingTakedowns) Lookup(context.Context, string, string, wire.Kind) (Takedown, bool, int, error) {
	return Takedown{}, false, 0, errStoreDown
}
func (failingTakedowns) List(context.Context, string) ([]Takedown, error) { return nil, errStoreDown }

func TestTakedownAPIStoreDown(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Takedowns = failingTakedowns{} })
	(&TakedownAPI{Server: f.srv, Keys: []string{takedownOpKey}, Logger: discard}).Register(f.engine)
	for _, method := range []string{"POST", "GET"} {
		rec := f.do(method, takedownsPath(room), takedownOpKey, `{"id":"1-0","k":1}`)
		if rec.Code != 503 || errorCode(t, rec) != "backend_unavailable" || strings.Contains(rec.Body.String(), "store down") {
			t.Fatalf("%s: %d %s", method, rec.Code, rec.Body)
		}
	}
}

// TestTakeDownFull: a room holding MaxTakedownsPerRoom takedowns refuses
// another (507 takedowns_full) and publishes nothing; a repeat of one it
// holds is still answered.
func TestTakeDownFull(t *testing.T) {
	f := newTakedownFixture(t)
	ctx := context.Background()
	for i := range MaxTakedownsPerRoom {
		td := Takedown{ID: wire.FormatID(1, uint64(i)), Kind: wire.KindBarrage, By: "x"}
		if _, _, err := f.srv.cfg.Takedowns.Add(ctx, room, td, MaxTakedownsPerRoom, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	rec := f.do("POST", takedownsPath(room), takedownOpKey, `{"id":"2-0","k":1}`)
	if rec.Code != http.StatusInsufficientStorage || errorCode(t, rec) != "takedowns_full" {
		t.Fatalf("over the bound: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", takedownsPath(room), takedownOpKey, `{"id":"1-5","k":1}`); rec.Code != http.StatusOK {
		t.Fatalf("repeat when full: %d %s", rec.Code, rec.Body)
	}
	if n := len(f.entries(t, room, stream.Live)); n != 0 {
		t.Fatalf("live lane holds %d entries", n)
	}
	if _, err := f.srv.TakeDown(ctx, room, wire.TakenDown{ID: "3-0", Kind: wire.KindBarrage}, "op", ""); !errors.Is(err, ErrTakedownsFull) {
		t.Fatalf("TakeDown when full: %v", err)
	}
}
