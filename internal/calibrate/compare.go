package calibrate

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"danmaku/internal/plan"
)

// Spread is the run-to-run spread of vs as ± a fraction of their median:
// (max − min) / 2 / median. Within ±15 % means Spread ≤ 0.15. 0 for fewer
// than two values or a median of 0.
func Spread(vs []float64) float64 {
	m := Median(vs)
	if len(vs) < 2 || m == 0 {
		return 0
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return (hi - lo) / 2 / m
}

// Compare writes a table of profiles' measured figures — each profile's
// value, their median and spread (Spread), and "over" where the spread
// exceeds limit (a fraction) — and returns the names of the figures over
// it, in field order. A figure of source design in every profile is left
// out (it is not measured).
func Compare(w io.Writer, profiles []*plan.Profile, limit float64) ([]string, error) {
	if len(profiles) < 2 {
		return nil, fmt.Errorf("calibrate: compare needs at least two profiles, got %d", len(profiles))
	}
	values := map[string][]float64{}
	units := map[string]string{}
	var names []string
	for i, p := range profiles {
		p.Figures.Each(func(name string, f plan.Figure) {
			if i == 0 {
				names = append(names, name)
			}
			values[name] = append(values[name], f.Value)
			if f.Source == plan.SourceMeasured {
				units[name] = f.Unit
			}
		})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"figure", "unit"}
	for i, p := range profiles {
		head = append(head, fmt.Sprintf("run %d (load %.0f)", i+1, p.Machine.LoadAvg1m))
	}
	head = append(head, "median", "spread ±", "")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	var over []string
	for _, name := range names {
		unit, ok := units[name]
		if !ok {
			continue
		}
		row := []string{name, unit}
		for _, v := range values[name] {
			row = append(row, num(v))
		}
		s := Spread(values[name])
		verdict := "ok"
		if s > limit {
			verdict = "over"
			over = append(over, name)
		}
		row = append(row, num(Median(values[name])), fmt.Sprintf("%.0f %%", s*100), verdict)
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	if len(over) > 0 {
		fmt.Fprintf(w, "%d of the measured figures spread over ±%.0f %%: %s\n", len(over), limit*100, strings.Join(over, ", "))
	} else {
		fmt.Fprintf(w, "every measured figure within ±%.0f %%\n", limit*100)
	}
	return over, nil
}

// num prints v with 4 significant figures, whole numbers from 1,000.
func num(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
