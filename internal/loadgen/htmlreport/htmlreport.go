// Package htmlreport writes a load generator's report (loadgen.Report) as
// one self-contained HTML page for people: comments offered, admitted and
// shown per second, latency percentiles over time by kind, drops by layer
// and reason, gifts delivered, errors by code, the nodes' own figures and a
// verdict against service levels (SLO), line by line.
//
// The page needs no network to be read: the report is inlined as JSON, and
// so is the charting library (Chart.js, vendored under vendor/ by
// sdk/web/scripts/vendor.mjs and embedded in the binary). Write is safe
// for concurrent use; it keeps no state.
package htmlreport

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"danmaku/internal/loadgen"
)

var (
	//go:embed vendor/chart.js
	chartJS string
	//go:embed report.js
	reportJS string
	//go:embed report.css
	reportCSS string
	//go:embed report.html.tmpl
	pageTmpl string
)

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"num":  num,
	"num2": num2, // cores: a node at 0.03 of a core is not "0"
	"pct":  pct,
	"ms":   func(f float64) string { return num(f) },
	"utc":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}).Parse(pageTmpl))

// inlined are the files the page inlines.
type inlined struct{ lib, js, css string }

// Write writes r, judged against slo, as one HTML page to w.
func Write(w io.Writer, r *loadgen.Report, slo SLO) error {
	return write(w, r, slo, inlined{chartJS, reportJS, reportCSS})
}

// write is Write with the inlined files given: the golden test renders the
// page around stand-ins, so that its golden file is the template's output
// alone.
func write(w io.Writer, r *loadgen.Report, slo SLO, in inlined) error {
	if r == nil {
		return errors.New("htmlreport: no report")
	}
	// The inlined scripts are the binary's own; one holding a closing tag
	// would end its element early.
	for _, s := range []string{in.lib, in.js, in.css} {
		if l := strings.ToLower(s); strings.Contains(l, "</script") || strings.Contains(l, "</style") {
			return errors.New("htmlreport: an inlined file holds a closing </script or </style")
		}
	}
	data := struct {
		R       *loadgen.Report
		SLO     SLO
		Verdict Verdict
		Nodes   []nodeRow
		Lib     template.JS
		JS      template.JS
		CSS     template.CSS
	}{r, slo, Judge(r, slo), nodeRows(r.Nodes), template.JS(in.lib), template.JS(in.js), template.CSS(in.css)}
	var b bytes.Buffer
	if err := page.Execute(&b, data); err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// nodeRow is one node's line in the per-node table: its figures over the
// samples read.
type nodeRow struct {
	Endpoint, Roles                     string
	Samples, Errors                     int64
	CPUMean, CPUPeak, RSSPeak           float64
	AdmittedMean, GiftsMean, EntryMean  float64
	ConnsPeak, FramesMean, RejectedMean float64
	Error                               string
}

// maxErrorText bounds an error's text in a table cell.
const maxErrorText = 80

// shorten cuts s to at most n bytes, on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func nodeRows(nr loadgen.NodesReport) []nodeRow {
	rows := make([]nodeRow, 0, len(nr.Nodes))
	for i := range nr.Nodes {
		n := &nr.Nodes[i]
		row := nodeRow{Endpoint: n.Endpoint, Roles: n.RolesString(), Errors: n.ScrapeErrors, Error: shorten(n.Error, maxErrorText)}
		var k float64
		for _, s := range n.Samples {
			if !s.OK {
				continue
			}
			k++
			row.Samples++
			row.CPUMean += s.CPUCores
			row.AdmittedMean += s.AdmittedPerSec
			row.GiftsMean += s.GiftsPerSec
			row.EntryMean += s.EntriesPerSec
			row.FramesMean += s.EdgeFramesPerSec
			row.RejectedMean += s.RejectedPerSec
			row.CPUPeak = max(row.CPUPeak, s.CPUCores)
			row.RSSPeak = max(row.RSSPeak, s.RSSMiB)
			row.ConnsPeak = max(row.ConnsPeak, s.EdgeConnections)
		}
		if k > 0 {
			for _, f := range []*float64{&row.CPUMean, &row.AdmittedMean, &row.GiftsMean, &row.EntryMean, &row.FramesMean, &row.RejectedMean} {
				*f /= k
			}
		}
		rows = append(rows, row)
	}
	return rows
}
