package plan

import (
	"fmt"
	"math"

	"danmaku/sdk/wire"
)

// Design constants of the arithmetic, each a property of the code or of
// AWS, not of a machine.
const (
	// giftMergeMs: the edge merges a room's gifts and system messages
	// into one frame per 55 ms window, so a viewer gets at most 1000/55
	// frames a second.
	giftMergeMs = 55.0
	// gslbSkipAt: the gslb hands out no edge above 95 % of its capacity.
	gslbSkipAt = 0.95
	// edgeMemoryShare: the share of an edge's memory planned for
	// connections (the rest: the runtime, rings, the kernel's buffers).
	edgeMemoryShare = 0.5
	// ingestSecondsInFlight: a comment waits for its room's next flush,
	// one per 150 ms window.
	ingestSecondsInFlight = 0.15
	// newConnsPerLCU: an ALB capacity unit takes 25 new connections a
	// second; one load balancer reserves at most 15,000 of them, and the
	// module makes at most 5.
	newConnsPerLCU   = 25.0
	maxLCUPerLB      = 15000.0
	maxLoadBalancers = 5
	// segmentHeaderBytes: a segment's fields besides its messages.
	segmentHeaderBytes = 64.0
	// httpOverhead: HTTP headers and TLS records over a segment's bytes.
	httpOverhead = 1.15
	// The barrage's p99 is the segment's duration plus what a comment
	// waits besides its slot (planSLO; docs/benchmarks.md, "Plan vs
	// reality on this machine"): flushWindowMs, the ingest's write-behind
	// window (its FlushWindow default: a comment gets its stream id, and
	// so its slot, when its room's batch is appended, up to 150 ms after
	// it arrived), the publish delay (wire.DefaultPublishDelayMs, 50 ms),
	// and pollBurstMs for the client's clock margin, every viewer's fetch
	// of the segment in the same millisecond through the CDN, and its
	// decode (make bench-latency: p99 1,098 ms at 1000 ms, 579 ms at 500 ms
	// with few comments in flush windows).
	flushWindowMs = 150.0
	pollBurstMs   = 200.0
	// giftNetMs: a gift's way besides the merge window and the fan-out
	// (the live lane's read, the network).
	giftNetMs = 50.0
	// entryP99Ms: an entry's p99 at the planned headroom (its own work is
	// ~22 µs; the rest is queueing and the network).
	entryP99Ms = 250.0
)

// barrageSlackMs is what the barrage's p99 adds to the longest segment:
// the waits of a comment besides its slot's.
const barrageSlackMs = flushWindowMs + wire.DefaultPublishDelayMs + pollBurstMs

// Roles planned, in the order a plan prints them.
var Roles = []string{"edge", "ingest", "gslb", "slicer", "redis"}

// Line is one figure of a plan: its value, the formula it came from and
// the event and profile fields it read.
type Line struct {
	Section string
	Name    string
	Value   float64
	Unit    string
	Formula string
	Fields  []string
}

// Fleet is one role's machines.
type Fleet struct {
	Role     string
	Instance Instance
	Count    int
	MaxCount int
	// Binding is the constraint that set Count.
	Binding string
	// Limit is the constraint that runs out first as the load grows, and
	// Utilization its load at the peak over the planned capacity (at
	// Event.Headroom), all zones up: the role whose utilization is highest
	// binds first.
	Limit       string
	Utilization float64
}

// SLO is the plan's service levels, the JSON `danmaku plan -slo-out`
// writes (read by loadgen's rehearsal report: keep the names).
type SLO struct {
	V                   int     `json:"v"`
	BarrageLatencyP99Ms float64 `json:"barrage_latency_p99_ms"`
	GiftLatencyP99Ms    float64 `json:"gift_latency_p99_ms"`
	EntryLatencyP99Ms   float64 `json:"entry_latency_p99_ms"`
	GiftDeliveredRatio  float64 `json:"gift_delivered_ratio"`
	BarrageShownRatio   float64 `json:"barrage_shown_ratio"`
	AdmittedPerS        float64 `json:"admitted_per_s"`
	BindingRole         string  `json:"binding_role"`
}

// RoleCPU is what the plan expects of one role's busiest machine at the
// peak, for a rehearsal to set against the CPU its nodes' /metrics show
// (`danmaku plan -slo-out` writes them under "roles").
type RoleCPU struct {
	Role  string `json:"role"`
	Nodes int    `json:"nodes"`
	VCPU  int    `json:"vcpu"`
	// CoresPerNode is the CPU the model gives the busiest machine at the
	// peak; Utilization the role's planned load over its capacity at
	// headroom (Fleet.Utilization), the figure that names the binding role.
	CoresPerNode float64 `json:"cpu_cores_per_node"`
	Utilization  float64 `json:"utilization"`
	// Limit is what runs out first as the load grows (Fleet.Limit); When
	// says when the CPU is spent (the gslb's at the join surge, before
	// the comments).
	Limit string `json:"limit"`
	When  string `json:"when,omitempty"`
	// Unit is the work the model costs the role's CPU by, and UnitCPUUs
	// the profile's CPU per unit: a rehearsal divides a node's measured
	// CPU by the units it did, whatever load the generator managed.
	Unit      string  `json:"unit,omitempty"`
	UnitCPUUs float64 `json:"cpu_us_per_unit,omitempty"`
}

// Plan is a computed deployment.
type Plan struct {
	Event   *Event
	Profile *Profile
	Lines   []Line
	Fleets  []Fleet // edge, ingest, gslb, slicer

	EdgeMaxConns     int
	IngestCapacity   int
	RedisShards      int
	RedisUtilization float64
	LoadBalancers    int
	LCUPerLB         int

	CDNRequestsPerS float64
	CDNGbps         float64
	OriginGetsPerS  float64
	S3PutsPerS      float64
	RedisOpsPerS    float64
	RedisShardOpsS  float64
	VCPU, VCPUMax   int
	RedisNodes      int
	SLO             SLO
	// RoleCPU is each machine role's planned CPU, in Roles' order.
	RoleCPU []RoleCPU
}

func (p *Plan) add(section, name string, v float64, unit, formula string, fields ...string) float64 {
	p.Lines = append(p.Lines, Line{Section: section, Name: name, Value: v, Unit: unit, Formula: formula, Fields: fields})
	return v
}

// Fleet returns the role's fleet.
func (p *Plan) Fleet(role string) Fleet {
	for _, f := range p.Fleets {
		if f.Role == role {
			return f
		}
	}
	return Fleet{}
}

// room is one room of a group, as the arithmetic sees it.
type room struct {
	group                        *RoomGroup
	viewers, offered, admitted   float64
	gifts, pushed, frames, shown float64
	segPerS                      float64
}

// survivors is the smallest count N spread over zones whose machines
// outside the lost zones (the fullest ones lost: N - lost*ceil(N/zones))
// are at least need.
func survivors(need float64, zones, lost int) int {
	if need <= 0 {
		return 1
	}
	n := max(1, int(math.Ceil(need)))
	for float64(n-lost*((n+zones-1)/zones)) < need-1e-9 {
		n++
	}
	return n
}

// New computes the plan of e on the figures of p, one role after another:
// each step reads what the steps before it decided.
func New(e *Event, p *Profile) (*Plan, error) {
	if err := e.Check(); err != nil {
		return nil, err
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	zones, lost := len(e.Zones), e.ZonesLost
	q := &planner{e: e, f: &p.Figures, pl: &Plan{Event: e, Profile: p}, zones: zones, lost: lost,
		zoneNote: fmt.Sprintf("smallest N with N - %d x ceil(N/%d) >= need (a zone of %d lost)", lost, zones, zones)}
	for _, step := range []func() error{q.planRooms, q.planEdge, q.planIngest, q.planGSLB, q.planSlicer, q.planRedis, q.planCDN, q.planFleets, q.planSLO} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return q.pl, nil
}

// planner is New's state between its steps.
type planner struct {
	e           *Event
	f           *Figures
	pl          *Plan
	zones, lost int
	zoneNote    string

	rooms                             []room
	offered, admitted, shown, gifts   float64
	nRooms                            int
	framesMean                        float64
	frameUs, maxConns                 float64
	frameField, edgeBind, edgeLimit   string
	edgeN, ingN, gsN, slN             int
	edgeUtil, ingUtil, gsUtil, slUtil float64
	slBind                            string
	// planned CPU of the busiest machine of each role at the peak
	edgeCPU, ingCPU, gsCPU, slCPU float64
}

// planRooms spreads the event over its rooms: what each is offered, stores, shows and pushes.
func (q *planner) planRooms() error {
	e, pl := q.e, q.pl
	// Rooms.
	for i := range e.Rooms {
		g := &e.Rooms[i]
		share := g.ViewerShare / float64(g.Count)
		r := room{group: g, viewers: e.Viewers * share, offered: e.CommentsPerS * share, gifts: e.GiftsPerS * share}
		if r.gifts > e.Budget {
			return fieldErr(CodeInfeasible, "gifts_per_s", "%.1f gifts a second in each room of %q, above the budget of %g messages a second: gifts are never dropped, so the backlog would grow until the rooms refuse gifts (more rooms or a higher budget)", r.gifts, g.Name, e.Budget)
		}
		r.admitted = math.Min(r.offered, e.RoomRefillPerS)
		r.pushed = r.gifts * e.GiftPushShare
		r.frames = math.Min(r.pushed, 1000/giftMergeMs)
		r.shown = math.Min(r.admitted, math.Max(0, e.Budget-r.gifts))
		r.segPerS = 1000 / float64(g.SegmentMs)
		q.rooms = append(q.rooms, r)
		n := float64(g.Count)
		q.offered += n * r.offered
		q.admitted += n * r.admitted
		q.shown += n * r.shown
		q.gifts += n * r.gifts
	}
	for _, r := range q.rooms {
		q.nRooms += r.group.Count
		q.framesMean += r.frames * r.viewers * float64(r.group.Count) / e.Viewers
	}
	pl.add("rooms", "rooms", float64(q.nRooms), "rooms", "sum of rooms[].count", "rooms[].count")
	pl.add("rooms", "comments stored", q.admitted, "/s", "sum over rooms of min(comments_per_s x share, room_refill_per_s)", "comments_per_s", "rooms[].viewer_share", "room_refill_per_s")
	pl.add("rooms", "comments shown", q.shown, "/s", "sum over rooms of min(stored, budget - gifts)", "budget", "gifts_per_s")
	pl.add("rooms", "frames per viewer", q.framesMean, "/s", fmt.Sprintf("viewer-weighted mean of min(gifts_per_s x gift_push_share x share, 1000/%g ms merge)", giftMergeMs), "gifts_per_s", "gift_push_share", "rooms[].viewer_share")

	return nil
}

// planEdge sizes the edges: connections by CPU per frame and by memory, and the join surge.
func (q *planner) planEdge() error {
	e, f, pl, zones, lost, zoneNote := q.e, q.f, q.pl, q.zones, q.lost, q.zoneNote
	// Edge.
	ed := e.Instances.Edge
	q.frameUs, q.frameField = f.EdgeCPUUsPerFrame.Value, "edge_cpu_us_per_frame"
	connBytes, connField := f.EdgeBytesPerConn.Value, "edge_bytes_per_conn"
	cps, cpsField := f.EdgeConnectsPerSCore.Value, "edge_connects_per_s_per_core"
	if e.NodeTLS {
		q.frameUs, q.frameField = f.EdgeCPUUsPerFrameTLS.Value, "edge_cpu_us_per_frame_tls"
		connBytes, connField = f.EdgeBytesPerConnTLS.Value, "edge_bytes_per_conn_tls"
		cps, cpsField = f.EdgeConnectsPerSCoreTLS.Value, "edge_connects_per_s_per_core_tls"
	}
	frameUs, frameField, framesMean := q.frameUs, q.frameField, q.framesMean
	idle := f.EdgeIdleCPUCores.Value
	usableCPU, err := usable(pl, "edge", ed.VCPU, e.Headroom, idle)
	if err != nil {
		return err
	}
	byCPU := math.Inf(1)
	if framesMean > 0 {
		byCPU = usableCPU / (framesMean * frameUs / 1e6)
	}
	pl.add("edge", "connections by CPU", byCPU, "per edge", "usable CPU / (frames per viewer x "+frameField+")", "instances.edge.vcpu", "headroom", "edge_idle_cpu_cores", frameField)
	byMem := ed.MemoryGiB * (1 << 30) * edgeMemoryShare / connBytes
	pl.add("edge", "connections by memory", byMem, "per edge", fmt.Sprintf("instances.edge.memory_gib x %g / %s", edgeMemoryShare, connField), "instances.edge.memory_gib", connField)
	maxConns := math.Floor(math.Min(math.Min(byCPU, byMem), 1e7)/100) * 100
	if maxConns < 100 {
		return fieldErr(CodeInfeasible, "instances.edge", "an edge holds %.0f connections: a bigger instance type, or fewer pushed gifts", maxConns)
	}
	pl.EdgeMaxConns = int(maxConns)
	q.maxConns = maxConns
	pl.add("edge", "edge_max_conns", maxConns, "per edge", "min(by CPU, by memory), down to hundreds", "instances.edge", frameField, connField)
	usable := maxConns * gslbSkipAt
	nConns := survivors(e.Viewers/usable, zones, lost)
	pl.add("edge", "edges for the viewers", float64(nConns), "machines", fmt.Sprintf("viewers / (edge_max_conns x %g); %s", gslbSkipAt, zoneNote), "viewers", "zones", "zones_lost")
	joinCap := cps * float64(ed.VCPU) * (1 - e.Headroom)
	nJoin := int(math.Ceil(e.JoinPerS / joinCap))
	pl.add("edge", "edges for the join surge", float64(nJoin), "machines", "join_per_s / ("+cpsField+" x instances.edge.vcpu x (1 - headroom))", "join_per_s", cpsField, "headroom")
	edgeN, edgeBind := nConns, "CPU per frame written"
	if byMem < byCPU {
		edgeBind = "memory per connection"
	}
	if nJoin > nConns {
		edgeN, edgeBind = nJoin, "connects per second (join surge)"
	}
	edgeUtil, edgeLimit := e.Viewers/(float64(edgeN)*usable), "connections (edge_max_conns)"
	if u := e.JoinPerS / (float64(edgeN) * joinCap); u > edgeUtil {
		edgeUtil, edgeLimit = u, "connects per second"
	}
	writes := pl.add("edge", "CPU of writes at the peak", float64(int(e.Viewers/float64(edgeN)+0.5))*framesMean*frameUs/1e6, "vCPU per edge", "viewers / edges x frames per viewer x "+frameField, frameField)
	q.edgeCPU = pl.add("edge", "CPU at the peak", idle+writes, "vCPU per edge", "edge_idle_cpu_cores + CPU of writes at the peak", "edge_idle_cpu_cores", frameField)
	if u := q.edgeCPU / (float64(ed.VCPU) * e.Headroom); u > edgeUtil {
		edgeUtil, edgeLimit = u, "CPU (idle + writes)"
	}

	q.edgeN, q.edgeBind, q.edgeLimit, q.edgeUtil = edgeN, edgeBind, edgeLimit, edgeUtil
	return nil
}

// planIngest sizes the ingests by CPU per post.
func (q *planner) planIngest() error {
	e, f, pl := q.e, q.f, q.pl
	// Ingest.
	in := e.Instances.Ingest
	idle := f.IngestIdleCPUCores.Value
	work := pl.add("ingest", "CPU of the posts", q.offered/f.IngestAdmittedPerSCore.Value, "vCPU", "comments_per_s / ingest_admitted_per_s_per_core", "comments_per_s", "ingest_admitted_per_s_per_core")
	ingN, use, err := q.byWork("ingest", "ingests", "CPU of the posts", in.VCPU, idle, work)
	if err != nil {
		return err
	}
	pl.IngestCapacity = max(10, int(math.Floor(use*f.IngestAdmittedPerSCore.Value*ingestSecondsInFlight/100))*100)
	pl.add("ingest", "ingest_capacity", float64(pl.IngestCapacity), "in flight", fmt.Sprintf("usable CPU x ingest_admitted_per_s_per_core x %g s, down to hundreds", ingestSecondsInFlight), "ingest_admitted_per_s_per_core", "ingest_idle_cpu_cores")
	q.ingCPU = pl.add("ingest", "CPU at the peak", idle+work/float64(ingN), "vCPU per ingest", "ingest_idle_cpu_cores + CPU of the posts / ingests", "ingest_idle_cpu_cores", "ingest_admitted_per_s_per_core")
	ingUtil := q.ingCPU / (float64(in.VCPU) * e.Headroom)

	q.ingN, q.ingUtil = ingN, ingUtil
	return nil
}

// planGSLB sizes the gslbs by CPU per entry, and their load balancers.
func (q *planner) planGSLB() error {
	e, f, pl := q.e, q.f, q.pl
	// gslb.
	gs := e.Instances.Gslb
	idle := f.GslbIdleCPUCores.Value
	work := pl.add("gslb", "CPU of the entries", e.JoinPerS/f.EntryAnswersPerSCore.Value, "vCPU", "join_per_s / entry_answers_per_s_per_core (at the join surge)", "join_per_s", "entry_answers_per_s_per_core")
	gsN, _, err := q.byWork("gslb", "gslbs", "CPU of the entries", gs.VCPU, idle, work)
	if err != nil {
		return err
	}
	pl.add("gslb", "CPU outside the surge", idle, "vCPU per gslb", "gslb_idle_cpu_cores: the load table's sync and the background reads, all show long", "gslb_idle_cpu_cores")
	q.gsCPU = pl.add("gslb", "CPU at the join surge", idle+work/float64(gsN), "vCPU per gslb", "gslb_idle_cpu_cores + CPU of the entries / gslbs", "gslb_idle_cpu_cores", "entry_answers_per_s_per_core")
	gsUtil := q.gsCPU / (float64(gs.VCPU) * e.Headroom)
	lcu := e.JoinPerS / newConnsPerLCU
	pl.LoadBalancers = max(1, int(math.Ceil(lcu/maxLCUPerLB)))
	if pl.LoadBalancers > maxLoadBalancers {
		return fieldErr(CodeInfeasible, "join_per_s", "%.0f new connections a second need %.0f LCU, more than %d load balancers of %.0f", e.JoinPerS, lcu, maxLoadBalancers, maxLCUPerLB)
	}
	pl.LCUPerLB = int(math.Ceil(lcu/float64(pl.LoadBalancers)/100)) * 100
	pl.add("lb", "LCU for the join surge", lcu, "LCU", fmt.Sprintf("join_per_s / %g new connections per LCU", newConnsPerLCU), "join_per_s")
	pl.add("lb", "gslb_load_balancers", float64(pl.LoadBalancers), "ALBs", fmt.Sprintf("ceil(LCU / %g reservable per ALB)", maxLCUPerLB), "join_per_s")
	pl.add("lb", "LCU reserved per ALB", float64(pl.LCUPerLB), "LCU", "LCU / ALBs, up to hundreds", "join_per_s")

	q.gsN, q.gsUtil = gsN, gsUtil
	return nil
}

// planSlicer sizes the slicers by the CPU of the rooms they lead.
func (q *planner) planSlicer() error {
	e, f, pl, zones, lost := q.e, q.f, q.pl, q.zones, q.lost
	// Slicer.
	sl := e.Instances.Slicer
	stored := q.admitted + q.gifts
	slVCPU := float64(q.nRooms)*f.SlicerCPUMsPerRoomS.Value/1000 + stored/f.SlicerMsgsPerSCore.Value
	pl.add("slicer", "vCPU for the rooms", slVCPU, "vCPU", "rooms x slicer_cpu_ms_per_room_s / 1000 + (stored comments + gifts) / slicer_msgs_per_s_per_core", "slicer_cpu_ms_per_room_s", "slicer_msgs_per_s_per_core", "gifts_per_s")
	idle := f.SlicerIdleCPUCores.Value
	use, err := usable(pl, "slicer", sl.VCPU, e.Headroom, idle)
	if err != nil {
		return err
	}
	slCPU := survivors(slVCPU/use, zones, lost)
	slN, slBind := slCPU, "CPU of the rooms led"
	if need := max(2, lost+1); slN <= need {
		slN, slBind = need, fmt.Sprintf("a standby after %d zone(s) lost", lost)
	}
	pl.add("slicer", "slicers", float64(slN), "machines", "max(vCPU for the rooms / usable CPU with a zone lost, zones_lost + 1 and at least 2)", "instances.slicer.vcpu", "headroom", "slicer_idle_cpu_cores", "zones_lost")
	// Every slicer idles, a standby too; a room is led by one slicer:
	// with fewer rooms than slicers, the busiest leads one room's share.
	pl.add("slicer", "CPU of a standby", idle, "vCPU per slicer", "slicer_idle_cpu_cores, all show long", "slicer_idle_cpu_cores")
	q.slCPU = pl.add("slicer", "CPU at the peak, busiest", idle+slVCPU/float64(max(1, min(slN, q.nRooms))), "vCPU per slicer", "slicer_idle_cpu_cores + vCPU for the rooms / min(slicers, rooms)", "slicer_idle_cpu_cores", "slicer_cpu_ms_per_room_s", "slicer_msgs_per_s_per_core")
	slUtil := (float64(slN)*idle + slVCPU) / (float64(slN*sl.VCPU) * e.Headroom)

	q.slN, q.slBind, q.slUtil = slN, slBind, slUtil
	return nil
}

// usable is the CPU of one machine of role left for its work at the
// planned headroom once it idles (vcpu x headroom - idle), as a line;
// infeasible when the idle takes all of it.
func usable(pl *Plan, role string, vcpu int, headroom, idle float64) (float64, error) {
	u := float64(vcpu)*headroom - idle
	if u <= 0 {
		return 0, fieldErr(CodeInfeasible, "instances."+role, "a %s idles at %.3g cores (%s_idle_cpu_cores), at or above its %d vCPU x headroom %g: a bigger instance type, or a higher headroom", role, idle, role, vcpu, headroom)
	}
	return pl.add(role, "usable CPU", u, "vCPU per "+role, "instances."+role+".vcpu x headroom - "+role+"_idle_cpu_cores", "instances."+role+".vcpu", "headroom", role+"_idle_cpu_cores"), nil
}

// byWork counts a role's machines: its work (cores) over each machine's
// usable CPU, a zone lost, as a line.
func (q *planner) byWork(role, machines, workName string, vcpu int, idle, work float64) (int, float64, error) {
	use, err := usable(q.pl, role, vcpu, q.e.Headroom, idle)
	if err != nil {
		return 0, 0, err
	}
	n := survivors(work/use, q.zones, q.lost)
	q.pl.add(role, machines, float64(n), "machines", workName+" / usable CPU; "+q.zoneNote, "instances."+role+".vcpu", "headroom", role+"_idle_cpu_cores")
	return n, use, nil
}

// The gslb's load-table sync (gslb.AllocatorConfig Sync and MaxSync): 200
// syncs a second at its fastest (every 5 ms), backing off to 20 (every
// 50 ms) while the table brings no news; the back-off's steps after a
// piece of news (5, 10, 20, 40 ms) are about 4 syncs. A node's report is
// news about once a second at a show's steady load (design, checked
// against the 600-viewer rehearsal's Redis commands).
const (
	fastestSyncsPerS = 200
	quietSyncShare   = 0.1
	syncsPerNews     = 4
	newsPerNodeS     = 1.0
)

// planRedis counts Redis commands per room and sizes the shards: a room's keys share one.
func (q *planner) planRedis() error {
	e, f, pl := q.e, q.f, q.pl
	// Redis.
	var shared, hot float64
	hotName := ""
	edgesAll := float64(q.edgeN)
	ingAll := float64(q.ingN)
	var total float64
	for _, r := range q.rooms {
		flushNodes := math.Min(ingAll, math.Max(1, r.offered*ingestSecondsInFlight))
		edgesReading := math.Min(edgesAll, math.Max(1, r.viewers))
		ops := r.admitted*f.RedisCmdsPerAdmitted.Value +
			flushNodes*f.RedisFlushCmdsPerRoomS.Value +
			r.gifts*f.RedisCmdsPerGift.Value +
			f.SlicerRedisCmdsPerRoomS.Value +
			edgesReading*math.Max(1, r.frames)
		total += ops * float64(r.group.Count)
		if ops > hot {
			hot, hotName = ops, r.group.Name
		}
	}
	// A gslb syncs at its fastest (redis_sync_cmds_per_gslb_s) only while
	// the table brings news; after a sync without it the gslb backs off (5,
	// 10, 20, 40, then 50 ms), about 4 syncs a piece of news, never under
	// its quiet 20 a second. A keep-alive report is not news; a node's
	// report is, about once a second at a show's steady load (the
	// 600-viewer rehearsal's Redis ran 1,113 commands/s with the joins,
	// which this puts at ~900 without them). A fleet of a few hundred
	// nodes keeps every gslb at its fastest.
	syncShare := math.Min(1, math.Max(quietSyncShare, (edgesAll+ingAll)*newsPerNodeS*syncsPerNews/fastestSyncsPerS))
	syncs := pl.add("redis", "gslb sync rate", syncShare, "of the fastest", fmt.Sprintf("min(1, max(%g, (edges + ingests) x %g news/s x %d syncs a piece of news / %d syncs a second)): the sync backs off while nothing changes", quietSyncShare, newsPerNodeS, syncsPerNews, fastestSyncsPerS), "redis_sync_cmds_per_gslb_s")
	shared = (edgesAll+ingAll)*f.RedisReportCmdsPerNodeS.Value + float64(q.gsN)*f.RedisSyncCmdsPerGslbS.Value*syncs
	total += shared
	pl.RedisOpsPerS = total
	pl.add("redis", "commands of the hottest room ("+hotName+")", hot, "/s",
		"stored x redis_cmds_per_admitted_comment + ingests flushing x redis_flush_cmds_per_room_node_s + gifts x redis_cmds_per_gift + slicer_redis_cmds_per_room_s + edges reading x max(1, frames)",
		"redis_cmds_per_admitted_comment", "redis_flush_cmds_per_room_node_s", "redis_cmds_per_gift", "slicer_redis_cmds_per_room_s")
	pl.add("redis", "commands of load reports and syncs", shared, "/s", "(edges + ingests) x redis_report_cmds_per_node_s + gslbs x redis_sync_cmds_per_gslb_s x gslb sync rate", "redis_report_cmds_per_node_s", "redis_sync_cmds_per_gslb_s")
	pl.add("redis", "commands", total, "/s", "sum over rooms + reports and syncs", "redis_ops_per_s_per_shard")
	capShard := f.RedisOpsPerSShard.Value * e.Headroom
	if hot > capShard {
		return fieldErr(CodeInfeasible, "rooms", "room group %q needs %.0f Redis commands a second on its one shard, above %.0f (redis_ops_per_s_per_shard x headroom): fewer pushed gifts or a lower room_refill_per_s", hotName, hot, capShard)
	}
	shards := 1
	perShard := func(n int) float64 {
		// A room's keys share a slot: the hottest room is on one shard,
		// the rest spread evenly (the load table over 16 slots).
		return hot + (total-hot)/float64(n)
	}
	for perShard(shards) > capShard && shards < 500 {
		shards++
	}
	if perShard(shards) > capShard {
		return fieldErr(CodeInfeasible, "", "Redis needs more than 500 shards")
	}
	pl.RedisShards = shards
	pl.RedisShardOpsS = perShard(shards)
	pl.RedisUtilization = pl.RedisShardOpsS / capShard
	pl.add("redis", "redis_shards", float64(shards), "shards", "smallest S with hottest room + (commands - hottest) / S <= redis_ops_per_s_per_shard x headroom", "redis_ops_per_s_per_shard", "headroom")
	pl.add("redis", "commands per shard, busiest", pl.RedisShardOpsS, "/s", "hottest room + (commands - hottest) / shards", "redis_ops_per_s_per_shard")
	pl.RedisNodes = shards * (1 + e.Redis.ReplicasPerShard)

	return nil
}

// planCDN counts CDN requests and egress, origin GETs and S3 PUTs.
func (q *planner) planCDN() error {
	e, f, pl := q.e, q.f, q.pl
	// CDN and S3.
	var cdnReq, egress, origin, puts float64
	for _, r := range q.rooms {
		n := float64(r.group.Count)
		msgs := math.Min(e.Budget, r.shown+r.gifts) / r.segPerS
		bytes := msgs*f.SegmentBytesPerMessage.Value + segmentHeaderBytes
		cdnReq += n * r.viewers * f.CDNRequestsPerViewerSeg.Value * r.segPerS
		egress += n * r.viewers * bytes * r.segPerS
		origin += n * f.OriginGetsPerRoomSegment.Value * r.segPerS
		puts += n * f.S3PutsPerRoomSegment.Value * r.segPerS
	}
	pl.CDNRequestsPerS = pl.add("cdn", "CDN requests", cdnReq, "/s", "sum over rooms of viewers x cdn_requests_per_viewer_segment x 1000/segment_ms", "cdn_requests_per_viewer_segment", "rooms[].segment_ms")
	pl.CDNGbps = pl.add("cdn", "CDN egress", egress*8*httpOverhead/1e9, "Gbps", fmt.Sprintf("sum over rooms of viewers x (min(budget, shown + gifts) per segment x segment_bytes_per_message + %g) x 1000/segment_ms x 8 x %g (headers, TLS)", segmentHeaderBytes, httpOverhead), "segment_bytes_per_message", "budget")
	pl.OriginGetsPerS = pl.add("cdn", "origin GETs", origin, "/s", "rooms x origin_gets_per_room_segment x 1000/segment_ms", "origin_gets_per_room_segment")
	pl.S3PutsPerS = pl.add("s3", "S3 PUTs", puts, "/s", "rooms x s3_puts_per_room_segment x 1000/segment_ms", "s3_puts_per_room_segment")

	return nil
}

// planFleets lists the fleets and their vCPU quota.
func (q *planner) planFleets() error {
	e, pl := q.e, q.pl
	// Fleets and quotas.
	margin := func(n int) int { return int(math.Ceil(float64(n) * (1 + e.ScaleOutMargin))) }
	pl.Fleets = []Fleet{
		{Role: "edge", Instance: e.Instances.Edge, Count: q.edgeN, MaxCount: margin(q.edgeN), Binding: q.edgeBind, Limit: q.edgeLimit, Utilization: q.edgeUtil},
		{Role: "ingest", Instance: e.Instances.Ingest, Count: q.ingN, MaxCount: margin(q.ingN), Binding: "CPU per post", Limit: "CPU (idle + posts)", Utilization: q.ingUtil},
		{Role: "gslb", Instance: e.Instances.Gslb, Count: q.gsN, MaxCount: margin(q.gsN), Binding: "CPU per entry (join surge)", Limit: "CPU (idle + entries at the join surge)", Utilization: q.gsUtil},
		{Role: "slicer", Instance: e.Instances.Slicer, Count: q.slN, MaxCount: q.slN, Binding: q.slBind, Limit: "CPU (idle + rooms led)", Utilization: q.slUtil},
	}
	for _, fl := range pl.Fleets {
		pl.VCPU += fl.Count * fl.Instance.VCPU
		pl.VCPUMax += fl.MaxCount * fl.Instance.VCPU
	}
	pl.add("quota", "vCPU at count", float64(pl.VCPU), "vCPU", "sum of count x instances.ROLE.vcpu", "instances")
	pl.add("quota", "vCPU at max_count", float64(pl.VCPUMax), "vCPU", "sum of ceil(count x (1 + scale_out_margin)) x vcpu (slicers at count)", "scale_out_margin")

	return nil
}

// planSLO writes the plan's service levels and the role that binds first.
func (q *planner) planSLO() error {
	e, pl := q.e, q.pl
	// Service levels.
	maxSeg := 0
	for _, r := range q.rooms {
		maxSeg = max(maxSeg, r.group.SegmentMs)
	}
	fanoutMs := q.maxConns * q.frameUs / float64(e.Instances.Edge.VCPU) / 1000
	pl.SLO = SLO{
		V:                   1,
		BarrageLatencyP99Ms: float64(maxSeg) + barrageSlackMs,
		GiftLatencyP99Ms:    math.Ceil(giftMergeMs + fanoutMs + giftNetMs),
		EntryLatencyP99Ms:   entryP99Ms,
		GiftDeliveredRatio:  1,
		BarrageShownRatio:   math.Round(q.shown/q.offered*1e6) / 1e6,
		AdmittedPerS:        math.Round(q.admitted),
	}
	pl.add("slo", "barrage p99", pl.SLO.BarrageLatencyP99Ms, "ms", fmt.Sprintf("longest segment_ms + %g ingest flush window + %d publish delay + %g clock margin, poll burst and decode", flushWindowMs, wire.DefaultPublishDelayMs, pollBurstMs), "rooms[].segment_ms")
	pl.add("slo", "gift p99", pl.SLO.GiftLatencyP99Ms, "ms", fmt.Sprintf("%g ms merge + edge_max_conns x %s / vcpu + %g ms", giftMergeMs, q.frameField, giftNetMs), q.frameField)
	pl.add("slo", "entry p99", pl.SLO.EntryLatencyP99Ms, "ms", "design: queueing at the planned headroom and the network", "headroom")
	pl.add("slo", "barrage shown ratio", pl.SLO.BarrageShownRatio, "", "comments shown / comments_per_s", "comments_per_s", "budget")

	cpu := map[string]float64{"edge": q.edgeCPU, "ingest": q.ingCPU, "gslb": q.gsCPU, "slicer": q.slCPU}
	for _, fl := range pl.Fleets {
		rc := RoleCPU{Role: fl.Role, Nodes: fl.Count, VCPU: fl.Instance.VCPU, CoresPerNode: cpu[fl.Role], Utilization: fl.Utilization, Limit: fl.Limit}
		switch fl.Role {
		case "edge":
			rc.Unit, rc.UnitCPUUs = "frame written", q.frameUs
		case "ingest":
			rc.Unit, rc.UnitCPUUs = "comment or gift posted", 1e6/q.f.IngestAdmittedPerSCore.Value
		case "gslb":
			rc.When = "the join surge (join_per_s)"
			rc.Unit, rc.UnitCPUUs = "entry answered", 1e6/q.f.EntryAnswersPerSCore.Value
		}
		pl.RoleCPU = append(pl.RoleCPU, rc)
	}
	util := map[string]float64{"edge": q.edgeUtil, "ingest": q.ingUtil, "gslb": q.gsUtil, "slicer": q.slUtil, "redis": pl.RedisUtilization}
	best := -1.0
	for _, r := range Roles {
		if util[r] > best {
			best, pl.SLO.BindingRole = util[r], r
		}
	}
	return nil
}
