package edge

import (
	"context"
	"fmt"
	"testing"

	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// TestSiteBroadcastsBesideRooms: site-wide broadcasts reach a room's
// viewers through their own queue: a storm of them does not close a
// connection whose room queue is small (it would, through the room queue)
// nor cost it a room gift; every room gift arrives once, in order; every
// broadcast arrives at most once, flagged Site; what a full site queue
// skipped is counted (the segments carry it).
func TestSiteBroadcastsBesideRooms(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.QueueSize = 2 }})
	ws := e.connect("r1", "")
	waitFor(t, "the room's hub and the site reader", func() bool { return e.srv.roomCount() == 1 })
	// The site reader tails the stream from its end as it found it: a
	// first broadcast, once offered, says it is reading (a storm appended
	// before it had found the end would be partly behind it).
	const storm = 400
	ctx := context.Background()
	siteSeen := func() float64 {
		return counter(e.srv.m.site.WithLabelValues("offered")) + counter(e.srv.m.site.WithLabelValues("skipped"))
	}
	polls := 0
	waitFor(t, "the site reader to offer a broadcast", func() bool {
		if siteSeen() > 0 {
			return true
		}
		// A broadcast the reader may not see (appended before it found
		// the end), asked again every 25 polls until one is offered.
		if polls++; polls%25 == 1 {
			if _, err := e.store.Append(ctx, stream.SiteKey, []wire.Message{{Kind: wire.KindSystem, Role: "ops", Text: "ready?", Site: true}}); err != nil {
				t.Fatal(err)
			}
		}
		return false
	})
	before := siteSeen()
	var gifts []string
	for i := range storm {
		if _, err := e.store.Append(ctx, stream.SiteKey, []wire.Message{{Kind: wire.KindSystem, Role: "ops", Text: fmt.Sprintf("site %d", i), Site: true}}); err != nil {
			t.Fatal(err)
		}
		if i%40 == 0 {
			gifts = append(gifts, e.append("r1", gift(int64(100+i), 1))[0].ID)
		}
	}
	// The room's end marker once the storm's frames are offered: a room
	// frame does not wait for the site path, so the marker would otherwise
	// end the read before any site frame came.
	waitFor(t, "the storm to be offered", func() bool {
		return siteSeen()-before >= storm
	})
	end := e.append("r1", sys("end"))[0].ID
	got, err := readUntil(ws, "r1", func(ms []wire.Message) bool {
		for _, m := range ms {
			if m.ID == end && !m.Site {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("the connection ended during the storm: %v", err)
	}
	var room []string
	site := map[string]int{}
	for _, m := range got {
		if m.Site {
			site[m.ID]++
			if site[m.ID] > 1 || m.Kind != wire.KindSystem {
				t.Fatalf("site message %+v twice or not a system message", m)
			}
			continue
		}
		room = append(room, m.ID)
	}
	want := append(gifts, end)
	if fmt.Sprint(room) != fmt.Sprint(want) {
		t.Fatalf("room messages %v, want %v", room, want)
	}
	if len(site) == 0 {
		t.Fatal("no site broadcast reached the viewer")
	}
	offered, skipped := counter(e.srv.m.site.WithLabelValues("offered")), counter(e.srv.m.site.WithLabelValues("skipped"))
	if offered+skipped < float64(len(site)) || counter(e.srv.m.closes.WithLabelValues(reasonResume)) != 0 {
		t.Fatalf("offered %v skipped %v for %d received; resume closes %v", offered, skipped, len(site), counter(e.srv.m.closes.WithLabelValues(reasonResume)))
	}
	t.Logf("%d site broadcasts in a storm: %d received, %v skipped for a full site queue; %d room gifts all received in order", storm, len(site), skipped, len(gifts))
}
