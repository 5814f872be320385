package sdk

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

// The client reports render drops and held-back sends to the edge as
// changes since the last report, across reconnects.
func TestCounterReportsReachTheEdge(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	reports := collectReports(w, &mu)
	rq, err := NewRenderQueue(RenderConfig{Visible: 1, Buffer: 1, Clock: w.clk})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // 3 of these overflow the one-message buffer
		rq.Push(Message{ID: "1-" + string(rune('0'+i)), Kind: KindBarrage})
	}
	w.run()
	w.newClient(func(cfg *Config) {
		cfg.Render = rq
		cfg.ReportInterval = 20 * time.Millisecond
	})
	total := func() (drops, held int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range *reports {
			drops += r.Drops
			held += r.Held
		}
		return
	}
	eventually(t, "the drops reported", func() bool { d, _ := total(); return d == 3 })
	rq.Push(Message{ID: "1-9", Kind: KindBarrage}) // one more drop
	eventually(t, "the next drop reported once", func() bool { d, _ := total(); return d == 4 })
	mu.Lock()
	defer mu.Unlock()
	for _, r := range *reports {
		if r.empty() {
			t.Fatalf("empty report sent: %+v", *reports)
		}
	}
}

// collectReports makes w's edge keep every report a client sends, under mu.
func collectReports(w *world, mu *sync.Mutex) *[]counterReport {
	var reports []counterReport
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			var r counterReport
			if typ == websocket.TextMessage && json.Unmarshal(data, &r) == nil {
				mu.Lock()
				reports = append(reports, r)
				mu.Unlock()
			}
		}
	}
	return &reports
}

// The reports carry the segments fetched, the first-poll hits and the
// latency of every barrage delivered, each once, with hits ≤ segs in each.
func TestReportsCarryPollsAndLatency(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	reports := collectReports(w, &mu)
	s0 := w.serverSecond()
	w.putSegment(s0+1, w.seqOf(s0+1),
		msgAt(s0+1, 100, 0, KindBarrage, "a"),
		msgAt(s0+1, 900, 0, KindBarrage, "b"))
	w.putSegment(s0+2, w.seqOf(s0+2), msgAt(s0+2, 500, 0, KindBarrage, "c"))
	w.lock(func() { w.hold[s0+2] = 1 }) // its first poll misses
	c := w.newClient(func(cfg *Config) { cfg.ReportInterval = 20 * time.Millisecond })
	w.run()
	receive(t, c, 3)
	w.pause()
	type sums struct{ segs, hits, lat int64 }
	total := func() (s sums) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range *reports {
			if r.Hits > r.Segs || (r.Lat != nil && len(r.Lat) != wire.LatencyBuckets) {
				t.Errorf("bad report %+v", r)
			}
			s.segs += r.Segs
			s.hits += r.Hits
			for _, n := range r.Lat {
				s.lat += n
			}
		}
		return s
	}
	// With the clock paused, the counters settle and the reports catch up.
	var want sums
	eventually(t, "every segment, hit and latency reported", func() bool {
		st := c.Stats()
		want = sums{st.SegmentsFetched, st.FirstPollHits, 3}
		return total() == want
	})
	if want.hits >= want.segs {
		t.Errorf("segs %d, hits %d: the held-back segment's miss is not counted", want.segs, want.hits)
	}
}

// next caps each report at the edge's bounds and carries the rest; a hit
// whose segment is not in this report waits for it.
func TestReportBounds(t *testing.T) {
	var r reporter
	var lat, skew [wire.LatencyBuckets]int64
	lat[0], lat[3] = wire.MaxReportLatencies-5, 10
	skew[1], skew[2] = wire.MaxReportLatencies, 3 // the display skew is bounded alike
	rep := r.next(0, 0, wire.MaxReportSegments+7, wire.MaxReportSegments+7, &lat, &skew)
	if rep.Segs != wire.MaxReportSegments || rep.Hits != wire.MaxReportSegments || rep.Lat[0] != wire.MaxReportLatencies-5 || rep.Lat[3] != 5 ||
		rep.Skew[1] != wire.MaxReportLatencies || rep.Skew[2] != 0 {
		t.Fatalf("first report %+v", rep)
	}
	r.sent(&rep)
	rep = r.next(0, 0, wire.MaxReportSegments+7, wire.MaxReportSegments+7, &lat, &skew)
	if rep.Segs != 7 || rep.Hits != 7 || rep.Lat[0] != 0 || rep.Lat[3] != 5 || rep.Skew[2] != 3 {
		t.Fatalf("second report %+v", rep)
	}
	r.sent(&rep)
	if rep = r.next(0, 0, wire.MaxReportSegments+7, wire.MaxReportSegments+7, &lat, &skew); !rep.empty() {
		t.Fatalf("third report %+v, want empty", rep)
	}
	// Hits read before segments can still outrun the segments of a report
	// whose segments were sent earlier: they wait.
	var r2 reporter
	r2.sentSegs = 5
	r2.sentHits = 4
	if rep = r2.next(0, 0, 5, 5, &[wire.LatencyBuckets]int64{}, &[wire.LatencyBuckets]int64{}); rep.Hits != 0 || !rep.empty() {
		t.Fatalf("hit without its segment: %+v", rep)
	}
	if rep = r2.next(0, 0, 6, 6, &[wire.LatencyBuckets]int64{}, &[wire.LatencyBuckets]int64{}); rep.Segs != 1 || rep.Hits != 1 {
		t.Fatalf("after the next segment: %+v", rep)
	}
}

// A barrage message's latency is the server time of its delivery less its
// id's millisecond, in the shared buckets.
func TestObserveLatency(t *testing.T) {
	var s counters
	for _, tt := range []struct {
		id     string
		now    int64
		bucket int
	}{
		{"1000-0", 1100, 0}, // 100 ms: the first bound is inclusive
		{"1000-0", 900, 0},  // a clock estimate's error: first bucket
		{"1000-3", 2250, 5}, // 1250 ms
		{"1000-0", 2251, 6}, // just above
		{"1000-0", 11_001, wire.LatencyBuckets - 1},
	} {
		before := s.latency[tt.bucket].Load()
		s.observeLatency(tt.id, tt.now)
		if s.latency[tt.bucket].Load() != before+1 {
			t.Errorf("%s at %d: not in bucket %d", tt.id, tt.now, tt.bucket)
		}
	}
	s.observeLatency("nope", 5)
	var n int64
	for i := range s.latency {
		n += s.latency[i].Load()
	}
	if n != 5 {
		t.Errorf("%d counted, want 5 (a malformed id is not)", n)
	}
}
