package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"danmaku/internal/metrictext"
)

// NodesReport is what the nodes' /metrics said during the offer and the
// drain, one node at a time: the figures a plan sizes by (CPU, memory,
// admitted comments, edge connections and frames…). Samples of every node
// are taken at the same instants, so Nodes[i].Samples[k] and
// Nodes[j].Samples[k] cover the same interval.
type NodesReport struct {
	// EverySeconds is the interval between two samples (doubled each time
	// a long run fills maxNodeSamples).
	EverySeconds float64 `json:"every_s"`
	Nodes        []Node  `json:"nodes"`
}

// Node is one metrics endpoint: a process, which may hold several roles
// (`danmaku dev` holds them all).
type Node struct {
	Endpoint string `json:"endpoint"`
	// Roles are the roles whose metrics the node serves: gslb, ingest,
	// slicer, edge.
	Roles []string `json:"roles"`
	// ScrapeErrors counts the reads that failed; the first is in Error.
	ScrapeErrors int64        `json:"scrape_errors,omitempty"`
	Error        string       `json:"error,omitempty"`
	Samples      []NodeSample `json:"samples"`
}

// NodeSample is one interval of a node: rates are over the interval,
// gauges as read at its end. A figure the node does not serve is 0.
type NodeSample struct {
	// T is the interval's end, in seconds since the offer began.
	T float64 `json:"t"`
	// OK: the node was read at T (and at the interval's start, for the
	// rates).
	OK bool `json:"ok"`
	// CPUCores is process_cpu_seconds_total's rate: cores in use.
	CPUCores float64 `json:"cpu_cores"`
	// RSSMiB is process_resident_memory_bytes in MiB.
	RSSMiB     float64 `json:"rss_mib"`
	Goroutines float64 `json:"goroutines"`
	// AdmittedPerSec is danmaku_ingest_accepted_total{kind="barrage"}'s
	// rate: comments stored; GiftsPerSec the gifts'.
	AdmittedPerSec float64 `json:"admitted_per_s"`
	GiftsPerSec    float64 `json:"gifts_per_s"`
	// RejectedPerSec is danmaku_ingest_rejected_total's rate, every
	// layer and reason.
	RejectedPerSec float64 `json:"rejected_per_s"`
	// EntriesPerSec is danmaku_gslb_entries_total's rate.
	EntriesPerSec float64 `json:"entries_per_s"`
	// EdgeConnections is danmaku_edge_connections; EdgeFramesPerSec
	// danmaku_edge_frames_sent_total's rate.
	EdgeConnections  float64 `json:"edge_connections"`
	EdgeFramesPerSec float64 `json:"edge_frames_per_s"`
	// SegmentsPerSec is danmaku_slicer_segments_total's rate.
	SegmentsPerSec float64 `json:"segments_per_s"`
}

// maxNodeSamples bounds a node's samples: past it, neighbours are merged
// two by two and the interval doubles, so a run of any length keeps a few
// hundred KiB of them.
const maxNodeSamples = 1800

// nodeReadTimeout bounds one read of a node's /metrics (at least the
// interval between reads).
const nodeReadTimeout = 5 * time.Second

// The families a node sample reads, and the role each tells of.
const (
	famCPU        = "process_cpu_seconds_total"
	famRSS        = "process_resident_memory_bytes"
	famGoroutines = "go_goroutines"
	famEntries    = "danmaku_gslb_entries_total"
	famEdgeConns  = "danmaku_edge_connections"
	famEdgeFrames = "danmaku_edge_frames_sent_total"
	// famSlicerRooms is served by every slicer, a standby that has written
	// no segment yet included: it tells the role.
	famSlicerRooms = "danmaku_slicer_rooms"
)

var nodeFamilies = []string{famCPU, famRSS, famGoroutines, famAccepted, famRejected, famEntries, famEdgeConns, famEdgeFrames, famSegments, famSlicerRooms}

// nodeRaw is one read of a node: the counters' values, not yet rates.
type nodeRaw struct {
	at                                                    time.Time
	cpu, admitted, gifts, rejected, entries, frames, segs float64
	rss, goroutines, conns                                float64
	roles                                                 []string
}

// nodeEndpoints are the nodes read for Report.Nodes: the ingest and
// slicer metrics endpoints and Config.NodeMetrics, each once.
func (g *Generator) nodeEndpoints(ingests []string) []string {
	var out []string
	for _, u := range slices.Concat(ingests, g.cfg.SlicerMetrics, g.cfg.NodeMetrics) {
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// scrapeNodes reads every node each NodeScrapeEvery from start until done
// is closed, and returns their samples.
func (g *Generator) scrapeNodes(ctx context.Context, start time.Time, done <-chan struct{}) NodesReport {
	every := g.cfg.NodeScrapeEvery
	if every < 0 {
		return NodesReport{Nodes: []Node{}}
	}
	eps := g.nodeEndpoints(g.metricEndpoints())
	rep := NodesReport{EverySeconds: every.Seconds(), Nodes: make([]Node, len(eps))}
	for i, ep := range eps {
		rep.Nodes[i] = Node{Endpoint: ep, Roles: []string{}, Samples: []NodeSample{}}
	}
	read := func() []*nodeRaw {
		cur := make([]*nodeRaw, len(eps))
		var wg sync.WaitGroup
		for i, ep := range eps {
			wg.Go(func() {
				// A loaded node answers /metrics slowly: a read may take
				// longer than the interval (the ticker then skips a beat)
				// rather than fail.
				rctx, cancel := context.WithTimeout(ctx, max(every, nodeReadTimeout))
				defer cancel()
				raw, err := readNode(rctx, g.hc, ep)
				if err != nil {
					n := &rep.Nodes[i]
					n.ScrapeErrors++
					if n.Error == "" {
						n.Error = err.Error()
					}
					return
				}
				cur[i] = raw
			})
		}
		wg.Wait()
		return cur
	}
	prev := read()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return rep
		case <-t.C:
		}
		cur := read()
		for i, c := range cur {
			n := &rep.Nodes[i]
			s := NodeSample{T: time.Since(start).Seconds()}
			if c != nil {
				n.Roles = c.roles
				s = c.sample(prev[i], start)
			}
			n.Samples = append(n.Samples, s)
			if len(n.Samples) > maxNodeSamples {
				n.Samples = halveSamples(n.Samples)
				if i == 0 {
					rep.EverySeconds *= 2
				}
			}
			// A failed read leaves the last good one as the next
			// interval's start: its rates then span the gap.
			if c != nil {
				prev[i] = c
			}
		}
	}
}

// sample turns two reads of a node into one interval's figures.
func (c *nodeRaw) sample(prev *nodeRaw, start time.Time) NodeSample {
	s := NodeSample{T: c.at.Sub(start).Seconds(), OK: prev != nil, RSSMiB: c.rss / (1 << 20), Goroutines: c.goroutines, EdgeConnections: c.conns}
	if prev == nil {
		return s
	}
	dt := c.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return s
	}
	rate := func(a, b float64) float64 { return max(a-b, 0) / dt } // a restart reads as 0, not negative
	s.CPUCores = rate(c.cpu, prev.cpu)
	s.AdmittedPerSec = rate(c.admitted, prev.admitted)
	s.GiftsPerSec = rate(c.gifts, prev.gifts)
	s.RejectedPerSec = rate(c.rejected, prev.rejected)
	s.EntriesPerSec = rate(c.entries, prev.entries)
	s.EdgeFramesPerSec = rate(c.frames, prev.frames)
	s.SegmentsPerSec = rate(c.segs, prev.segs)
	return s
}

// halveSamples merges neighbours two by two: rates and gauges averaged,
// the later one's end kept. An odd last sample stays as it is.
func halveSamples(in []NodeSample) []NodeSample {
	out := in[:0]
	for i := 0; i < len(in); i += 2 {
		if i+1 == len(in) {
			out = append(out, in[i])
			break
		}
		a, b := in[i], in[i+1]
		avg := func(x, y float64) float64 { return (x + y) / 2 }
		out = append(out, NodeSample{
			T: b.T, OK: a.OK && b.OK,
			CPUCores: avg(a.CPUCores, b.CPUCores), RSSMiB: avg(a.RSSMiB, b.RSSMiB), Goroutines: avg(a.Goroutines, b.Goroutines),
			AdmittedPerSec: avg(a.AdmittedPerSec, b.AdmittedPerSec), GiftsPerSec: avg(a.GiftsPerSec, b.GiftsPerSec),
			RejectedPerSec: avg(a.RejectedPerSec, b.RejectedPerSec), EntriesPerSec: avg(a.EntriesPerSec, b.EntriesPerSec),
			EdgeConnections: avg(a.EdgeConnections, b.EdgeConnections), EdgeFramesPerSec: avg(a.EdgeFramesPerSec, b.EdgeFramesPerSec),
			SegmentsPerSec: avg(a.SegmentsPerSec, b.SegmentsPerSec),
		})
	}
	return out
}

// readNode reads one node's /metrics into a nodeRaw.
func readNode(ctx context.Context, hc *http.Client, base string) (*nodeRaw, error) {
	u := base + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return parseNode(resp.Body, time.Now())
}

// parseNode reads a /metrics answer taken at at.
func parseNode(r io.Reader, at time.Time) (*nodeRaw, error) {
	got, err := metrictext.Parse(r, func(f string) bool { return slices.Contains(nodeFamilies, f) })
	if err != nil {
		return nil, err
	}
	raw := &nodeRaw{at: at, roles: []string{}}
	seen := map[string]bool{}
	// Each family adds up into one figure, but the accepted comments and
	// gifts, which are one family told apart by kind.
	into := map[string]*float64{famCPU: &raw.cpu, famRSS: &raw.rss, famGoroutines: &raw.goroutines, famRejected: &raw.rejected,
		famEntries: &raw.entries, famEdgeConns: &raw.conns, famEdgeFrames: &raw.frames, famSegments: &raw.segs}
	byKind := map[string]*float64{"barrage": &raw.admitted, "gift": &raw.gifts}
	for k, v := range got {
		seen[k.Family] = true
		f := into[k.Family]
		if k.Family == famAccepted {
			f = byKind[series{k.Family, k.Labels}.label("kind")]
		}
		if f != nil {
			*f += v
		}
	}
	for _, r := range []struct {
		role string
		fams []string
	}{{"gslb", []string{famEntries}}, {"ingest", []string{famAccepted, famRejected}}, {"slicer", []string{famSegments, famSlicerRooms}}, {"edge", []string{famEdgeConns}}} {
		if slices.ContainsFunc(r.fams, func(f string) bool { return seen[f] }) {
			raw.roles = append(raw.roles, r.role)
		}
	}
	return raw, nil
}

// RolesString is the node's roles for people: "gslb+ingest", or "?" when
// it served none of the families that tell them.
func (n *Node) RolesString() string {
	if len(n.Roles) == 0 {
		return "?"
	}
	return strings.Join(n.Roles, "+")
}
