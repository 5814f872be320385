package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"danmaku/internal/metrictext"
)

// The ingest answers {"ok":true} to a comment it stores and to one it drops
// silently (flow control), so the generator cannot see drops per comment.
// It reads them instead from the nodes' Prometheus counters, before and
// after the run: these families, summed over every node scraped.
const (
	famRejected = "danmaku_ingest_rejected_total"         // {layer, reason, event, room}
	famAccepted = "danmaku_ingest_accepted_total"         // {kind, event, room}
	famOverflow = "danmaku_ingest_bucket_overflow_total"  // {bucket}
	famSampled  = "danmaku_slicer_dropped_total"          // {reason}
	famShown    = "danmaku_slicer_segment_messages_total" // {queue}
	famSegments = "danmaku_slicer_segments_total"         // {outcome}
	// famIngestAll matches every other counter of the ingest (duplicates,
	// sensitive words, bans, the global limit, flushes…): the report lists
	// their increases as they are named, so a layer added to the ingest
	// shows up without a change here.
	famIngestAll = "danmaku_ingest_*_total"
)

// ingestFamilies are read from the ingest endpoints; slicerFamilies from
// the slicer endpoints, or from the ingest endpoints when none is named (in
// `danmaku dev` and any process running both roles, one registry serves
// both).
var (
	ingestFamilies = []string{famRejected, famAccepted, famOverflow, famIngestAll}
	slicerFamilies = []string{famSampled, famShown, famSegments}
)

// series is one counter: family and labels in a canonical order.
type series struct {
	family string
	labels string // `k="v",k2="v2"`, keys sorted
}

// sample is one scrape of the wanted families from several endpoints,
// summed per series.
type sample struct {
	values map[series]float64
	errors []string // endpoints that could not be read
}

// scrape reads the wanted families from every endpoint and sums them.
func scrape(ctx context.Context, hc *http.Client, ingests, slicers []string) sample {
	s := sample{values: map[series]float64{}}
	read := func(base string, fams []string) {
		if err := scrapeOne(ctx, hc, base, fams, s.values); err != nil {
			s.errors = append(s.errors, err.Error())
		}
	}
	if len(slicers) == 0 {
		for _, u := range ingests {
			read(u, append(append([]string(nil), ingestFamilies...), slicerFamilies...))
		}
		return s
	}
	for _, u := range ingests {
		read(u, ingestFamilies)
	}
	for _, u := range slicers {
		read(u, slicerFamilies)
	}
	return s
}

func scrapeOne(ctx context.Context, hc *http.Client, base string, fams []string, into map[series]float64) error {
	u := strings.TrimRight(base, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return parseMetrics(resp.Body, fams, into)
}

// parseMetrics adds the samples of the wanted families in Prometheus text
// exposition format to into (read by internal/metrictext); other families
// are skipped, and so are samples that are not a counter, gauge or untyped
// value.
func parseMetrics(r io.Reader, fams []string, into map[series]float64) error {
	exact := map[string]bool{}
	var globs [][2]string // prefix, suffix
	for _, f := range fams {
		if pre, suf, ok := strings.Cut(f, "*"); ok {
			globs = append(globs, [2]string{pre, suf})
		} else {
			exact[f] = true
		}
	}
	want := func(name string) bool {
		if exact[name] {
			return true
		}
		for _, g := range globs {
			if len(name) > len(g[0])+len(g[1]) && strings.HasPrefix(name, g[0]) && strings.HasSuffix(name, g[1]) {
				return true
			}
		}
		return false
	}
	got, err := metrictext.Parse(r, want)
	if err != nil {
		return err
	}
	for k, v := range got {
		into[series{k.Family, k.Labels}] += v
	}
	return nil
}

// delta is after minus before per series. A negative difference means a
// node restarted during the run (its counters began again at 0): the after
// value is then the best lower bound, and resets says it happened.
func delta(before, after sample) (map[series]float64, bool) {
	out := map[series]float64{}
	reset := false
	for k, a := range after.values {
		d := a - before.values[k]
		if d < 0 {
			d, reset = a, true
		}
		if d != 0 {
			out[k] = d
		}
	}
	return out, reset
}

// label returns the value of key in a canonical label string. Values are
// Go-quoted and may hold commas, so the string is walked quote by quote
// rather than split.
func (s series) label(key string) string {
	rest := s.labels
	for rest != "" {
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			return ""
		}
		q, err := strconv.QuotedPrefix(after)
		if err != nil {
			return ""
		}
		if k == key {
			v, _ := strconv.Unquote(q)
			return v
		}
		rest = strings.TrimPrefix(after[len(q):], ",")
	}
	return ""
}
