package event_test

import (
	"encoding/json"
	"testing"

	"danmaku/internal/event"
)

// FuzzEventBody: any body the API may be sent decodes and validates without
// a panic, and what validates is within the bounds.
func FuzzEventBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","start":"2026-12-24T19:00:00Z","end":"2026-12-24T23:00:00Z","rooms":[{"id":"r","shares":[0.1,0.3,0.2,0.4]}]}`,
		`{"id":"x","rooms":[{"id":"r","limits":{"room_refill":1e308}}]}`,
		`{"rooms":[{"id":"r","shares":[0.25,0.25,0.25,0.25,0]}]}`, `null`, `[]`, `{"end":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e event.Event
		if json.Unmarshal(b, &e) != nil {
			return
		}
		if e.Validate() != nil {
			return
		}
		if len(e.Rooms) == 0 || len(e.Rooms) > event.MaxRooms || !e.End.After(e.Start) {
			t.Fatalf("accepted %+v", e)
		}
	})
}
