package edge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/sdk/wire"
)

// The service levels only clients see, as their reports carry them
// (sdk/wire/report.go): segments fetched and first-poll hits, and a
// histogram of the barrage latency, in buckets every SDK shares with the
// edge.

// latencyCounts is a report's "lat": one count per bucket of
// wire.LatencyBoundsMs and one above the last. It is an array, so that a
// report stays comparable; set tells an absent "lat" from an empty one.
type latencyCounts struct {
	n   [wire.LatencyBuckets]uint32
	set bool
}

// UnmarshalJSON takes an array of exactly wire.LatencyBuckets counts.
func (l *latencyCounts) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return fmt.Errorf("%w: a histogram (lat, skew) is null", errBadReport)
	}
	var n []uint32
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	if len(n) != wire.LatencyBuckets {
		return fmt.Errorf("%w: a histogram (lat, skew) has %d buckets, want %d", errBadReport, len(n), wire.LatencyBuckets)
	}
	copy(l.n[:], n)
	l.set = true
	return nil
}

// MarshalJSON writes the counts (a test's client sends what the edge reads).
func (l latencyCounts) MarshalJSON() ([]byte, error) { return json.Marshal(l.n) }

// checkSLOFields refuses a report whose service-level fields are out of
// range: more segments than a client fetches between two reports, more
// first-poll hits than segments, more latencies than a client is shown.
func checkSLOFields(r *report) error {
	if r.Segs > wire.MaxReportSegments {
		return fmt.Errorf("%w: segs out of range", errBadReport)
	}
	if r.Hits > r.Segs {
		return fmt.Errorf("%w: hits above segs", errBadReport)
	}
	for _, l := range []struct {
		name string
		c    *latencyCounts
	}{{"lat", &r.Lat}, {"skew", &r.Skew}} {
		var total uint64
		for _, n := range l.c.n {
			total += uint64(n)
		}
		if total > wire.MaxReportLatencies {
			return fmt.Errorf("%w: %s out of range", errBadReport, l.name)
		}
	}
	return nil
}

// latencyValueMs is where a bucket's counts are observed: the middle of
// the bucket, and 1.5 times the last bound for what is above it. The
// histogram's buckets are exact; its _sum (and so a mean) is approximate.
func latencyValueMs(i int) float64 {
	b := wire.LatencyBoundsMs
	switch {
	case i == 0:
		return float64(b[0]) / 2
	case i < len(b):
		return float64(b[i-1]+b[i]) / 2
	}
	return 1.5 * float64(b[len(b)-1])
}

// latencyHist is danmaku_client_barrage_latency_seconds: the clients'
// histograms added up, per event and room (event.Directory.MetricLabels:
// at most one series per room an event defines, plus "other"). A report
// adds many observations per bucket at once, which a prometheus.Histogram
// can only take one by one, so the counts are kept here and exposed as
// constant histograms on each scrape.
type latencyHist struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	rooms map[[2]string]*latencyRoom
}

type latencyRoom struct {
	counts [wire.LatencyBuckets]uint64
	sumUs  uint64 // microseconds, at latencyValueMs per count
}

var _ prometheus.Collector = (*latencyHist)(nil)

func newLatencyHist() *latencyHist {
	return &latencyHist{desc: prometheus.NewDesc(
		"danmaku_client_barrage_latency_seconds",
		"End-to-end latency of barrage (ingest acceptance to delivery to the app, by the server clock the SDK estimates), as reported by clients in fixed buckets, by event and room; _sum is approximate (each count taken at its bucket's middle).",
		[]string{"event", "room"}, nil), rooms: map[[2]string]*latencyRoom{}}
}

// newSkewHist is danmaku_client_display_skew_seconds: how long after its
// playhead time a message was shown by clients synchronised to their video
// (sdk/playhead.go), in the latency buckets; clients without a playhead
// send none.
func newSkewHist() *latencyHist {
	return &latencyHist{desc: prometheus.NewDesc(
		"danmaku_client_display_skew_seconds",
		"Display skew of clients synchronised to their video's playhead: the time on the viewer's playhead a message was shown at less the sender's playhead time, as reported by clients in fixed buckets, by event and room; _sum is approximate.",
		[]string{"event", "room"}, nil), rooms: map[[2]string]*latencyRoom{}}
}

func (h *latencyHist) add(ev, room string, l *latencyCounts) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[[2]string{ev, room}]
	if r == nil {
		r = &latencyRoom{}
		h.rooms[[2]string{ev, room}] = r
	}
	for i, n := range l.n {
		if n == 0 {
			continue
		}
		r.counts[i] += uint64(n)
		r.sumUs += uint64(n) * uint64(latencyValueMs(i)*1000)
	}
}

func (h *latencyHist) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

func (h *latencyHist) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, r := range h.rooms {
		buckets := make(map[float64]uint64, len(wire.LatencyBoundsMs))
		var cum uint64
		for i, b := range wire.LatencyBoundsMs {
			cum += r.counts[i]
			buckets[float64(b)/1000] = cum
		}
		cum += r.counts[len(wire.LatencyBoundsMs)]
		ch <- prometheus.MustNewConstHistogram(h.desc, cum, float64(r.sumUs)/1e6, buckets, k[0], k[1])
	}
}

// addSLO adds a report's service-level fields to the metrics.
// ev and room are the connection's event and room label values.
func (m *metrics) addSLO(ev, room string, r *report) {
	m.firstPolls.WithLabelValues("hit", ev, room).Add(float64(r.Hits))
	m.firstPolls.WithLabelValues("miss", ev, room).Add(float64(r.Segs - r.Hits))
	if r.Lat.set {
		m.latency.add(ev, room, &r.Lat)
	}
	if r.Skew.set {
		m.skew.add(ev, room, &r.Skew)
	}
}
