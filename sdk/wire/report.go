package wire

// The client's report to the edge (edge/README.md, docs/api.md "Client
// frames") carries, besides its counters, what the client measured of the
// two service levels only a client sees: how many segments it fetched and
// how many its first request found ("segs", "hits"), and a histogram of the
// end-to-end latency of the barrage it delivered to the app ("lat"). Every
// SDK and the edge share the bounds below, so that the edge can re-export
// the histogram without knowing any single latency.

// LatencyBoundsMs are the upper bounds, inclusive, of the report's latency
// buckets in milliseconds; "lat" has one count per bound plus one for what
// is above the last (LatencyBuckets). The bounds bracket the design's
// targets: p99 ≤ segment duration + 250 ms (0.5 s, 0.75 s and 1.25 s for
// 250 ms, 500 ms and 1 s segments). The web SDK carries a copy
// (sdk/web/danmaku.js, LATENCY_BOUNDS_MS), held to this one by a test.
var LatencyBoundsMs = [...]int64{100, 250, 500, 750, 1000, 1250, 1500, 2000, 3000, 5000, 10000}

// LatencyBuckets is the length of a report's "lat" array.
const LatencyBuckets = len(LatencyBoundsMs) + 1

// LatencyBucket returns the bucket of a latency of ms milliseconds: the
// first whose bound is ≥ ms (a negative latency, from a clock estimate's
// error, is the first bucket).
func LatencyBucket(ms int64) int {
	for i, b := range LatencyBoundsMs {
		if ms <= b {
			return i
		}
	}
	return len(LatencyBoundsMs)
}

// Bounds of one report: no honest client comes near them between two
// reports (at the default 10 s interval, 250 ms segments make 40 segments,
// and a viewer is shown some 60 comments a second); an SDK with more to
// report sends at most this much and the rest with the next report.
const (
	// MaxReportSegments bounds "segs" (and so "hits", which is ≤ "segs").
	MaxReportSegments = 600
	// MaxReportLatencies bounds the sum of the "lat" counts.
	MaxReportLatencies = 10_000
	// MaxReportCounter bounds "drops" and "held" each: the edge adds at
	// most 200 of the two together a second of a connection's life
	// (edge.Config.ReportRate) and refuses a report beyond that whole, so
	// an SDK sends at most 10 s worth (its report interval) at a time.
	MaxReportCounter = 1_000
)
