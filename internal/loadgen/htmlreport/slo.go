package htmlreport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// SLOVersion is the version of the service-level file this package reads.
const SLOVersion = 1

// ErrBadSLO is returned for a service-level file that cannot be used:
// malformed JSON, an unknown field or version, a missing or out-of-range
// figure. The message names the field.
var ErrBadSLO = errors.New("htmlreport: bad service levels")

// SLO are the service levels a rehearsal is judged against, as `danmaku
// plan -slo-out` writes them:
//
//	{"v":1,"barrage_latency_p99_ms":1400,"gift_latency_p99_ms":100,
//	 "entry_latency_p99_ms":500,"gift_delivered_ratio":1,
//	 "barrage_shown_ratio":0.99,"admitted_per_s":160,"binding_role":"edge"}
type SLO struct {
	V int `json:"v"`
	// BarrageLatencyP99Ms bounds the p99 of a comment's send → decoded by
	// a poller through the CDN.
	BarrageLatencyP99Ms float64 `json:"barrage_latency_p99_ms"`
	// GiftLatencyP99Ms bounds the p99 of a gift's send → decoded by a
	// poller (over the edge when the pollers hold it).
	GiftLatencyP99Ms float64 `json:"gift_latency_p99_ms"`
	// EntryLatencyP99Ms bounds the p99 of GET /v1/entry.
	EntryLatencyP99Ms float64 `json:"entry_latency_p99_ms"`
	// GiftDeliveredRatio is the least share of the gift orders that every
	// poller must have received (1: all of them; gifts are never lost).
	GiftDeliveredRatio float64 `json:"gift_delivered_ratio"`
	// BarrageShownRatio is the least share of the comments answered 200
	// that a poller must have decoded.
	BarrageShownRatio float64 `json:"barrage_shown_ratio"`
	// AdmittedPerSec is the least rate of comments the ingests must have
	// stored over the offer; 0 sets no floor.
	AdmittedPerSec float64 `json:"admitted_per_s"`
	// BindingRole is the role the plan says binds first; the report names
	// it beside the role it measured binding first.
	BindingRole string `json:"binding_role,omitempty"`
	// Roles are the plan's CPU per machine role (optional): the report
	// sets each against its nodes' measured CPU, and names the role whose
	// busiest node used the largest share of its vCPU.
	Roles []RolePlan `json:"roles,omitempty"`
}

// RolePlan is one machine role as planned (`danmaku plan -slo-out`'s
// "roles").
type RolePlan struct {
	Role  string `json:"role"`
	Nodes int    `json:"nodes"`
	VCPU  int    `json:"vcpu"`
	// CoresPerNode is the CPU the plan gives the role's busiest machine
	// at the peak; Utilization its planned load over capacity.
	CoresPerNode float64 `json:"cpu_cores_per_node"`
	Utilization  float64 `json:"utilization"`
	Limit        string  `json:"limit,omitempty"`
	When         string  `json:"when,omitempty"`
	// Unit is the work the plan costs the role by (edge: "frame written",
	// ingest: "comment or gift posted", gslb: "entry answered"), and
	// UnitCPUUs the profile's CPU per unit.
	Unit      string  `json:"unit,omitempty"`
	UnitCPUUs float64 `json:"cpu_us_per_unit,omitempty"`
}

// roleNames are the roles a RolePlan may name: the machine roles whose
// /metrics the report reads.
var roleNames = []string{"edge", "ingest", "gslb", "slicer"}

// The defaults of DefaultSLO, from the design's numbers (docs/loadgen.md):
// a comment within its segment plus 400 ms (the ingest's flush window
// 150, the publish delay 50, the clock margin, poll burst and decode 200:
// danmaku plan's barrage p99), a gift over the edge within 100 ms, every
// gift delivered, 99 % of the comments shown.
const (
	defaultBarrageSlackMs   = 400
	defaultGiftEdgeP99Ms    = 100
	defaultEntryP99Ms       = 500
	defaultBarrageShown     = 0.99
	defaultSegmentMs        = 1000
	defaultGiftDeliveredAll = 1
)

// DefaultSLO are the service levels used without a file: barrage p99 ≤
// the segment duration + 400 ms; gift p99 ≤ 100 ms over the edge, or the
// barrage bound when the pollers read gifts from the segments only; entry
// p99 ≤ 500 ms; every gift delivered; 99 % of the comments shown; no floor
// on the admitted rate.
func DefaultSLO(segmentMs int64, edge bool) SLO {
	if segmentMs <= 0 {
		segmentMs = defaultSegmentMs
	}
	s := SLO{
		V:                   SLOVersion,
		BarrageLatencyP99Ms: float64(segmentMs + defaultBarrageSlackMs),
		GiftLatencyP99Ms:    defaultGiftEdgeP99Ms,
		EntryLatencyP99Ms:   defaultEntryP99Ms,
		GiftDeliveredRatio:  defaultGiftDeliveredAll,
		BarrageShownRatio:   defaultBarrageShown,
	}
	if !edge {
		s.GiftLatencyP99Ms = s.BarrageLatencyP99Ms
	}
	return s
}

// maxSLOBytes bounds the file read: a service-level file is a few lines.
const maxSLOBytes = 64 << 10

// ReadSLO reads and checks a service-level file. Every field but
// binding_role is required; unknown fields are refused, so that a typo is
// not a silently missing target.
func ReadSLO(r io.Reader) (SLO, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSLOBytes+1))
	if err != nil {
		return SLO{}, fmt.Errorf("%w: %v", ErrBadSLO, err)
	}
	if len(b) > maxSLOBytes {
		return SLO{}, fmt.Errorf("%w: larger than %d bytes", ErrBadSLO, maxSLOBytes)
	}
	var raw struct {
		V                   *int       `json:"v"`
		BarrageLatencyP99Ms *float64   `json:"barrage_latency_p99_ms"`
		GiftLatencyP99Ms    *float64   `json:"gift_latency_p99_ms"`
		EntryLatencyP99Ms   *float64   `json:"entry_latency_p99_ms"`
		GiftDeliveredRatio  *float64   `json:"gift_delivered_ratio"`
		BarrageShownRatio   *float64   `json:"barrage_shown_ratio"`
		AdmittedPerSec      *float64   `json:"admitted_per_s"`
		BindingRole         string     `json:"binding_role"`
		Roles               []RolePlan `json:"roles"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return SLO{}, fmt.Errorf("%w: %v", ErrBadSLO, err)
	}
	if dec.More() {
		return SLO{}, fmt.Errorf("%w: more than one JSON value", ErrBadSLO)
	}
	if raw.V == nil {
		return SLO{}, fmt.Errorf("%w: v is missing", ErrBadSLO)
	}
	if *raw.V != SLOVersion {
		return SLO{}, fmt.Errorf("%w: v %d: this version reads v %d", ErrBadSLO, *raw.V, SLOVersion)
	}
	s := SLO{V: *raw.V, BindingRole: raw.BindingRole}
	for _, f := range []struct {
		name  string
		in    *float64
		out   *float64
		ratio bool
	}{
		{"barrage_latency_p99_ms", raw.BarrageLatencyP99Ms, &s.BarrageLatencyP99Ms, false},
		{"gift_latency_p99_ms", raw.GiftLatencyP99Ms, &s.GiftLatencyP99Ms, false},
		{"entry_latency_p99_ms", raw.EntryLatencyP99Ms, &s.EntryLatencyP99Ms, false},
		{"gift_delivered_ratio", raw.GiftDeliveredRatio, &s.GiftDeliveredRatio, true},
		{"barrage_shown_ratio", raw.BarrageShownRatio, &s.BarrageShownRatio, true},
		{"admitted_per_s", raw.AdmittedPerSec, &s.AdmittedPerSec, false},
	} {
		switch {
		case f.in == nil:
			return SLO{}, fmt.Errorf("%w: %s is missing", ErrBadSLO, f.name)
		case *f.in < 0 || math.IsInf(*f.in, 0):
			return SLO{}, fmt.Errorf("%w: %s %v: need a finite number ≥ 0", ErrBadSLO, f.name, *f.in)
		case f.ratio && *f.in > 1:
			return SLO{}, fmt.Errorf("%w: %s %v: a ratio, at most 1", ErrBadSLO, f.name, *f.in)
		}
		*f.out = *f.in
	}
	if len(s.BindingRole) > 64 {
		return SLO{}, fmt.Errorf("%w: binding_role: at most 64 bytes", ErrBadSLO)
	}
	seen := map[string]bool{}
	for i, r := range raw.Roles {
		switch {
		case !slices.Contains(roleNames, r.Role):
			return SLO{}, fmt.Errorf("%w: roles[%d].role %q: one of %v", ErrBadSLO, i, r.Role, roleNames)
		case seen[r.Role]:
			return SLO{}, fmt.Errorf("%w: roles[%d].role %q twice", ErrBadSLO, i, r.Role)
		case r.Nodes < 1 || r.VCPU < 1:
			return SLO{}, fmt.Errorf("%w: roles[%d]: nodes and vcpu at least 1", ErrBadSLO, i)
		case !finite(r.CoresPerNode) || !finite(r.Utilization) || !finite(r.UnitCPUUs):
			return SLO{}, fmt.Errorf("%w: roles[%d]: cpu_cores_per_node, utilization and cpu_us_per_unit finite numbers ≥ 0", ErrBadSLO, i)
		case len(r.Limit) > 128 || len(r.When) > 128 || len(r.Unit) > 128:
			return SLO{}, fmt.Errorf("%w: roles[%d]: limit, when and unit at most 128 bytes", ErrBadSLO, i)
		}
		seen[r.Role] = true
		s.Roles = append(s.Roles, r)
	}
	return s, nil
}

// finite: a number ≥ 0, not infinite.
func finite(f float64) bool { return f >= 0 && !math.IsInf(f, 0) }
