package loadgen

import (
	"time"

	"danmaku/internal/hist"
)

// The generator's latencies are recorded and reported with the shared
// histogram (internal/hist); the names stay for the report's types.
type (
	Histogram     = hist.Histogram
	HistogramData = hist.Data
	Summary       = hist.Summary
)

// ms is d in milliseconds as the report gives it (hist.Ms).
func ms(d time.Duration) float64 { return hist.Ms(d) }
