package testenv

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"danmaku/internal/metrictext"
)

// MetricSeries scrapes base+"/metrics" (read by internal/metrictext) and
// returns family name's series: each value (a counter, gauge or untyped
// sample) keyed by its labels as `{k="v",k2="v2"}`, names sorted, "" for a
// series without labels. A family the endpoint does not serve gives an
// empty map, not an error: a counter appears at its first increment.
func MetricSeries(ctx context.Context, base, name string) (map[string]float64, error) {
	got, err := Scrape(ctx, base, func(f string) bool { return f == name })
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for k, v := range got {
		key := ""
		if k.Labels != "" {
			key = "{" + k.Labels + "}"
		}
		out[key] = v
	}
	return out, nil
}

// Scrape reads base+"/metrics" once and returns the samples of the
// families want keeps (internal/metrictext).
func Scrape(ctx context.Context, base string, want func(family string) bool) (map[metrictext.Series]float64, error) {
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
	got, err := metrictext.Parse(resp.Body, want)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	return got, nil
}
