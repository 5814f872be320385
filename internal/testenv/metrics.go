package testenv

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricSeries scrapes base+"/metrics" with the Prometheus text parser and
// returns family name's series: each value (a counter, gauge or untyped
// sample) keyed by its labels as `{k="v",k2="v2"}`, names sorted, "" for a
// series without labels. A family the endpoint does not serve gives an
// empty map, not an error: a counter appears at its first increment.
func MetricSeries(ctx context.Context, base, name string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	out := map[string]float64{}
	for _, m := range mfs[name].GetMetric() {
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
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
		key := ""
		if len(labels) > 0 {
			slices.Sort(labels)
			key = "{" + strings.Join(labels, ",") + "}"
		}
		out[key] = v
	}
	return out, nil
}
