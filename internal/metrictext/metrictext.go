// Package metrictext reads Prometheus text exposition (a /metrics answer)
// with the Prometheus client's own parser (expfmt) into plain sums: the one
// way the load generator and the tests read another process's metrics.
// It is stateless and safe for concurrent use.
package metrictext

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series is one sample: its family and its labels as `k="v",k2="v2"`
// (Go-quoted values, names sorted; "" for none).
type Series struct {
	Family string
	Labels string
}

// Parse reads r and returns the value of every counter, gauge and untyped
// sample of the families want accepts (nil: every family); histograms and
// summaries are skipped. Malformed text is an error.
func Parse(r io.Reader, want func(family string) bool) (map[Series]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[Series]float64{}
	for name, mf := range mfs {
		if want != nil && !want(name) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Untyped != nil:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			slices.Sort(labels)
			out[Series{name, strings.Join(labels, ",")}] = v
		}
	}
	return out, nil
}
