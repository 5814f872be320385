package gslbsim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one strategy's run.
type Result struct {
	Strategy string
	// Samples is the utilisation every Config.Sample, and at the end.
	Samples []Sample
	// Worst is the sample with the highest max/mean after the warm-up;
	// P50 and P95 are percentiles of max/mean over those samples.
	Worst    Sample
	P50, P95 float64
	// Final is the last sample.
	Final Sample
	// Classes is the final utilisation per capacity class of live edges,
	// largest first: a spread blind to capacity shows up as small edges
	// fuller than large ones.
	Classes []Class
	// Arrivals is the trace's length; each was Placed on an edge or
	// Refused (the strategy answered an error, or every address it handed
	// out was dead).
	Arrivals, Placed, Refused int
	// Departed counts viewers whose session ended within the run.
	Departed int
	// Connected is the number of viewers on an edge at the end.
	Connected int
	// Redirected counts arrivals after the death that were handed the dead
	// edge first and dialled a fallback; RedirectedSpread is where they went.
	Redirected       int
	RedirectedSpread Spread
	// PlacedOnDead counts viewers connected to the dead edge after its
	// death. A correct run has none.
	PlacedOnDead int
	// Killed is what became of the dead edge's viewers.
	Killed Kill
	// Reports counts the load reports the nodes wrote to the table, and
	// ReportRate is that per node per second of the run.
	Reports    int
	ReportRate float64
}

// Sample is the live edges' utilisation (connections over capacity) at one
// instant.
type Sample struct {
	At time.Duration
	// Max is the highest utilisation of one live edge.
	Max float64
	// Mean is the live edges' connections over their capacity: what every
	// edge would hold with a perfect spread.
	Mean float64
}

// Ratio is Max/Mean: 1 is a perfect spread.
func (s Sample) Ratio() float64 {
	if s.Mean == 0 {
		return 0
	}
	return s.Max / s.Mean
}

// Class is the live edges of one capacity at the end of the run.
type Class struct {
	Capacity, Edges int
	// Use is the class's connections over its capacity; Max the fullest
	// edge's utilisation.
	Use, Max float64
}

// Kill is the fate of the dead edge's viewers.
type Kill struct {
	Edge     string
	Capacity int
	At       time.Duration
	// Viewers were connected to it when it died. Each then Reconnected,
	// Left (its session ended during the wait), or was Lost (no live
	// address even after asking again); Rejoined counts those that found
	// no live fallback and asked their allocator again.
	Viewers, Reconnected, Left, Lost, Rejoined int
	// Spread is where the reconnections went.
	Spread Spread
}

// Spread is how a group of viewers spread over the live edges, judged
// against each edge's headroom when the edge died: the connections it could
// take before reaching 95 % of capacity, where allocators drop it. A fair
// spread gives each edge a share proportional to its headroom.
type Spread struct {
	Viewers int
	// Edges is how many edges took at least one.
	Edges int
	// MaxEdge took the largest share, MaxShare; FairShare is that edge's
	// share of the total headroom, what it would have taken in a fair
	// spread.
	MaxEdge             string
	MaxShare, FairShare float64
	// CV is the coefficient of variation, over the live edges, of viewers
	// taken per unit of headroom: 0 is a spread exactly proportional to
	// headroom; all on one edge of a hundred equal ones is about 10.
	CV float64
}

func (s Spread) String() string {
	if s.Viewers == 0 {
		return "-"
	}
	return fmt.Sprintf("%d viewers on %d edges; max %.1f%% on %s (fair %.1f%%); CV %.2f",
		s.Viewers, s.Edges, 100*s.MaxShare, s.MaxEdge, 100*s.FairShare, s.CV)
}

// WriteTable writes the results as the tables docs quote: utilisation
// balance, then where the dead edge's viewers went, then max/mean over time
// every step.
func WriteTable(w io.Writer, rs []Result, step time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tmax/mean worst\tat\tp50\tp95\tfinal\tfinal max\tfinal mean\tplaced\trefused\tleft\treports/node/s\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.3f\t%v\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t%.1f\t\n",
			r.Strategy, r.Worst.Ratio(), r.Worst.At.Round(time.Millisecond), r.P50, r.P95,
			r.Final.Ratio(), r.Final.Max, r.Final.Mean, r.Placed, r.Refused, r.Departed, r.ReportRate)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rs) > 0 && len(rs[0].Classes) > 0 {
		fmt.Fprintln(w, "\nfinal utilisation by edge capacity (class mean / fullest edge):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "strategy\t")
		for _, c := range rs[0].Classes {
			fmt.Fprintf(tw, "%d ×%d\t", c.Capacity, c.Edges)
		}
		fmt.Fprintln(tw)
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t", r.Strategy)
			for _, c := range r.Classes {
				fmt.Fprintf(tw, "%.3f / %.3f\t", c.Use, c.Max)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rs) > 0 && rs[0].Killed.Edge != "" {
		k := rs[0].Killed
		fmt.Fprintf(w, "\n%s (capacity %d) dies at %v:\n", k.Edge, k.Capacity, k.At)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "strategy\tits viewers\treconnected\trejoined\tspread of the reconnections\tredirected joins\tspread of the redirected")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%s\n", r.Strategy, r.Killed.Viewers, r.Killed.Reconnected,
				r.Killed.Rejoined, r.Killed.Spread, r.Redirected, r.RedirectedSpread)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if step <= 0 || len(rs) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nmax/mean over time:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Strategy
	}
	fmt.Fprintf(tw, "t\tmean\t%s\t\n", strings.Join(names, "\t"))
	for j, s := range rs[0].Samples {
		if s.At%step != 0 && j != len(rs[0].Samples)-1 {
			continue
		}
		fmt.Fprintf(tw, "%v\t%.3f", s.At.Round(time.Millisecond), s.Mean)
		for _, r := range rs {
			fmt.Fprintf(tw, "\t%.3f", r.Samples[j].Ratio())
		}
		fmt.Fprintln(tw, "\t")
	}
	return tw.Flush()
}
