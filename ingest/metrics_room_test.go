package ingest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/event"
)

// TestRoomLabelsBounded: a client naming 10,000 rooms (comments with a
// token for another room, gifts for rooms no event has) creates at most one
// event/room label pair per room of the event, plus "other".
func TestRoomLabelsBounded(t *testing.T) {
	ev := event.Event{ID: "show", Start: t0.Add(-time.Minute), End: t0.Add(time.Hour),
		Rooms: []event.Room{{ID: room}, {ID: "backstage"}}}
	f := newFixture(t, func(c *Config) {
		dir, err := event.DirectoryOf(c.Clock, ev)
		if err != nil {
			t.Fatal(err)
		}
		c.Events = dir
	})
	tok := f.token(t, room, "u1", auth.RoleViewer)
	if rec := f.do(http.MethodPost, barragePath(room), tok, `{"text":"hi"}`); rec.Code != http.StatusOK {
		t.Fatalf("barrage: %d %s", rec.Code, rec.Body)
	}
	for i := range 10000 {
		name := fmt.Sprintf("room%d", i)
		if i%2 == 0 {
			f.do(http.MethodPost, barragePath(name), tok, `{"text":"hi"}`)
		} else {
			f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(func(m map[string]any) { m["room"] = name }))
		}
	}
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[[2]string]bool{}
	for _, mf := range mfs {
		if n := mf.GetName(); n != "danmaku_ingest_accepted_total" && n != "danmaku_ingest_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var p [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "event":
					p[0] = l.GetValue()
				case "room":
					p[1] = l.GetValue()
				}
			}
			pairs[p] = true
		}
	}
	if !pairs[[2]string{"show", room}] || !pairs[[2]string{event.OtherLabel, event.OtherLabel}] {
		t.Fatalf("label pairs %v: want the event's room and other", pairs)
	}
	if len(pairs) > len(ev.Rooms)+1 {
		t.Fatalf("%d event/room label pairs after 10,000 rooms, want at most %d: %v", len(pairs), len(ev.Rooms)+1, pairs)
	}
}
