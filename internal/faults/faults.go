// Package faults is the fault table and the soak of docs/reliability.md:
// the whole stack under a show's load (`danmaku loadgen`), every role its
// own process, while one thing breaks at a time (`make reliability`), or
// for minutes while nothing does (`make soak`). The drivers are the
// package's tests TestReliability and TestSoak, which run only when their
// environment variables ask (the Makefile targets set them); what is here
// is what they share and what is cheap to test: the table's rows, its
// markdown, writing it between markers, a cuttable TCP proxy, and slopes.
//
// Nothing in the package keeps state between calls; a Proxy is safe for
// concurrent use.
package faults

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Row is one fault's line of the table.
type Row struct {
	// Fault says what was done ("slicer leader SIGKILL").
	Fault string
	// GiftsAccepted were answered stored by the gift API (a retry's
	// duplicate answer included: stored once, its first answer lost).
	GiftsAccepted int64
	// GiftsInSegments are the distinct gift ids the room's segments hold;
	// GiftsSegmentDoubled the ids found in more than one segment slot.
	GiftsInSegments     int64
	GiftsSegmentDoubled int64
	// GiftsToAll are the accepted gifts every joined viewer decoded.
	GiftsToAll int64
	// Lost and Doubled are (viewer, gift) pairs: a joined viewer never
	// decoded an accepted gift, or decoded it twice.
	Lost, Doubled int64
	// Viewers joined at the end, of those asked for.
	Viewers, ViewersAsked int
	// BarrageAdmitted were answered 200 and stored (the ingest's count);
	// BarrageShown the comments of the run at least one viewer decoded.
	BarrageOK, BarrageAdmitted, BarrageShown int64
	// Recovery is the time from the fault to the end of the last moment
	// the stack was seen unwell (Unwell says by what); 0: never.
	Recovery time.Duration
	Unwell   string
	// Errors are what clients were answered other than success, by
	// "kind code" ("barrage 503 backend_unavailable").
	Errors map[string]int64
	// Alerts are the alert rules that fired (or were pending) during the
	// row, from a real Prometheus evaluating the repository's rules.
	Alerts []string
	// JumpsToLive and SeqGaps are the viewers' SDK counters: segments a
	// lagging viewer skipped to catch up, and gaps in the segment
	// sequence it saw (the edge still carries the gifts of both).
	JumpsToLive, SeqGaps int64
	// Note is anything the row needs said (a scaled load, a blocked row).
	Note string
	// Incomplete: the row did not run to its end; it does not pass.
	Incomplete bool
}

// Pass reports whether the row kept every gift exactly once.
func (r Row) Pass() bool {
	return !r.Incomplete && r.Lost == 0 && r.Doubled == 0 && r.GiftsSegmentDoubled == 0 &&
		r.GiftsInSegments == r.GiftsAccepted && r.GiftsToAll == r.GiftsAccepted
}

// Markdown renders rows as the table docs/reliability.md shows.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| fault | gifts accepted / in segments / to every viewer | lost | doubled | viewers | barrage ok / admitted / shown | recovery | client-visible errors | alerts | |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		verdict := "pass"
		if !r.Pass() {
			verdict = "**FAIL**"
		}
		rec := "none seen"
		if r.Recovery > 0 {
			rec = fmt.Sprintf("%.1f s", r.Recovery.Seconds())
			if r.Unwell != "" {
				rec += " (" + r.Unwell + ")"
			}
		}
		if r.JumpsToLive > 0 || r.SeqGaps > 0 {
			rec += fmt.Sprintf("; viewers jumped to live %d, sequence gaps %d", r.JumpsToLive, r.SeqGaps)
		}
		alerts := "none"
		if len(r.Alerts) > 0 {
			alerts = strings.Join(r.Alerts, ", ")
		}
		fault := r.Fault
		if r.Note != "" {
			fault += " — " + r.Note
		}
		doubled := fmt.Sprint(r.Doubled)
		if r.GiftsSegmentDoubled > 0 {
			doubled += fmt.Sprintf(" (+%d in segments)", r.GiftsSegmentDoubled)
		}
		fmt.Fprintf(&b, "| %s | %d / %d / %d | %d | %s | %d/%d | %d / %d / %d | %s | %s | %s | %s |\n",
			fault, r.GiftsAccepted, r.GiftsInSegments, r.GiftsToAll, r.Lost, doubled,
			r.Viewers, r.ViewersAsked, r.BarrageOK, r.BarrageAdmitted, r.BarrageShown,
			rec, FormatCounts(r.Errors), alerts, verdict)
	}
	return b.String()
}

// FormatCounts writes counts as "k n; k n" in key order, or "none".
func FormatCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// ErrNoMarkers is returned by ReplaceBetween when the document lacks the
// begin or end marker (or has them out of order).
var ErrNoMarkers = errors.New("faults: markers not found")

// Marker returns the begin and end markers of the generated block name.
func Marker(name string) (begin, end string) {
	return "<!-- " + name + ": begin (generated; do not edit) -->",
		"<!-- " + name + ": end -->"
}

// ReplaceBetween returns doc with the text between the markers of name
// replaced by body (the markers kept).
func ReplaceBetween(doc, name, body string) (string, error) {
	begin, end := Marker(name)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("%w: %q … %q", ErrNoMarkers, begin, end)
	}
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	return doc[:i+len(begin)] + "\n" + body + doc[j:], nil
}

// Slope is a least-squares line through one soak series.
type Slope struct {
	// PerMin is the fitted growth per minute; StdErr its standard error.
	PerMin, StdErr float64
	// Mean is the series' mean level.
	Mean float64
	N    int
	// Rho is the lag-1 autocorrelation of the residuals (0 to 0.95),
	// which StdErr is widened by.
	Rho float64
}

// showLength is what a soak's slope is projected over: a long show.
const showLength = 4 * time.Hour

// maxShowGrowth is the growth over showLength, as a fraction of the
// level, that a real but slow slope may reach and still pass: a process
// at 150 % of its size at the end of a long show is sized for; a leak
// that matters grows faster.
const maxShowGrowth = 0.5

// Fit fits ys against ts (minutes since the start). It needs three
// points; with fewer, N says so and the rest is zero.
func Fit(ts, ys []float64) Slope {
	n := len(ts)
	if n < 3 || len(ys) != n {
		return Slope{N: n}
	}
	var mt, my float64
	for i := range n {
		mt += ts[i]
		my += ys[i]
	}
	mt /= float64(n)
	my /= float64(n)
	var sxx, sxy float64
	for i := range n {
		sxx += (ts[i] - mt) * (ts[i] - mt)
		sxy += (ts[i] - mt) * (ys[i] - my)
	}
	if sxx == 0 {
		return Slope{N: n, Mean: my}
	}
	b := sxy / sxx
	res := make([]float64, n)
	var rss, lag float64
	for i := range n {
		res[i] = ys[i] - (my + b*(ts[i]-mt))
		rss += res[i] * res[i]
		if i > 0 {
			lag += res[i] * res[i-1]
		}
	}
	// Samples 10 s apart are not independent: memory moves in steps and a
	// burst spans several samples, so the residuals are correlated and
	// the plain standard error claims more certainty than the samples
	// hold. Widen it for lag-1 autocorrelation (an AR(1) series' effective
	// sample size): a steady leak leaves scattered residuals around its
	// line and keeps its narrow error; a step or a burst does not.
	rho := 0.0
	if rss > 0 {
		rho = min(max(lag/rss, 0), 0.95)
	}
	se := math.Sqrt(rss/float64(n-2)/sxx) * math.Sqrt((1+rho)/(1-rho))
	return Slope{PerMin: b, StdErr: se, Mean: my, N: n, Rho: rho}
}

// Flat is a slope's verdict, with the reason: flat within noise (the
// fitted slope is within two standard errors of zero: no trend the
// samples can tell from their scatter), or a trend too slow to matter
// (projected over a 4-hour show it adds less than half the level), or a
// real growth (a leak candidate). A shrinking series passes.
func (s Slope) Flat() (bool, string) {
	return s.FlatOf(math.Abs(s.Mean))
}

// FlatOf is Flat with the trend weighed against level instead of the
// series' own mean: for a part of a whole (memory outside the Go runtime
// is weighed against the process's resident set, what it adds to).
func (s Slope) FlatOf(level float64) (bool, string) {
	switch {
	case s.N < 3:
		return false, "too few samples"
	case s.PerMin <= 2*s.StdErr:
		return true, "flat within noise (slope ≤ 2 standard errors)"
	case level != 0 && s.PerMin*showLength.Minutes() <= maxShowGrowth*level:
		return true, fmt.Sprintf("a trend, but +%.0f %% over a 4-hour show (≤ %.0f %%)", 100*s.PerMin*showLength.Minutes()/level, 100*maxShowGrowth)
	default:
		return false, "grows: a leak candidate"
	}
}

// NoNewHigh reports whether the last third of a count's fitted samples
// (the last fitted of ys) stays at or under the highest before them, the
// warm-up's included: the joins are the load's peak of concurrency (every
// viewer and sender connecting at once), and a count bounded by the load
// — connections, their goroutines, a pool grown to a burst — does not
// pass it again; a leak keeps setting highs. It needs six fitted samples.
func NoNewHigh(ys []float64, fitted int) bool {
	if fitted < 6 || fitted > len(ys) {
		return false
	}
	cut := len(ys) - fitted/3
	return slices.Max(ys[cut:]) <= slices.Max(ys[:cut])
}

// goArenaRange is where the Go heap's arenas lie on linux/amd64 and
// linux/arm64 in a binary built with GOEXPERIMENT=norandomizedheapbase64
// (Go 1.26 otherwise places the heap at a random address): the runtime
// asks the kernel for them at its first hint address (0x00c0<<32 on amd64,
// 0x0040<<32 on arm64) and grows up from there, 64 MiB at a time; only a
// heap past 256 GiB moves on to the next hint (1<<40 above). The kernel
// places every mapping asked without an address (libc's malloc arenas,
// thread stacks, shared libraries, the runtime's own metadata) top-down
// from near the top of the user address space (0x7f… on amd64), and the
// brk heap (`[heap]`) sits just past the binary, so nothing else falls in
// this range.
func goArenaRange() (lo, hi uint64, ok bool) {
	switch runtime.GOARCH {
	case "amd64":
		return 0x00c0 << 32, 1 << 40, true
	case "arm64":
		return 0x0040 << 32, 1 << 40, true
	}
	return 0, 0, false
}

// AnonOutsideGoHeap reads a process's /proc/PID/smaps and returns the
// anonymous resident bytes outside the Go heap's arenas (libc's malloc —
// the brk `[heap]` and its 64 MiB thread arenas —, the stacks of the
// threads it starts, C libraries' mmaps, and the Go runtime's own
// metadata: span and cache structures, GC work buffers, profiling
// buckets, a few MiB sized off the heap) and those inside them (the Go
// heap, goroutine stacks included, as far as it is touched: pages the
// runtime has mapped and never written are not resident, so neither is
// counted). It fails on a process with no mapping in the arena range
// (not a Go process, or one built with the heap's base randomized): a
// measure that would count the heap as outside it.
func AnonOutsideGoHeap(smaps []byte) (outside, arenas int64, err error) {
	goArenaLo, goArenaHi, ok := goArenaRange()
	if !ok {
		return 0, 0, fmt.Errorf("faults: smaps: the Go heap's place on %s is not known", runtime.GOARCH)
	}
	inArena, found := false, false
	for line := range strings.Lines(string(smaps)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("faults: smaps: bad mapping line %q", strings.TrimSpace(line))
			}
			inArena = start >= goArenaLo && end <= goArenaHi
			found = found || inArena
			continue
		}
		if f[0] != "Anonymous:" || len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("faults: smaps: bad line %q", strings.TrimSpace(line))
		}
		if inArena {
			arenas += kb << 10
		} else {
			outside += kb << 10
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("faults: smaps: no mapping in the Go heap's arena range [%#x, %#x): built with the heap's base randomized (GOEXPERIMENT=norandomizedheapbase64 fixes it)?", goArenaLo, goArenaHi)
	}
	return outside, arenas, nil
}
