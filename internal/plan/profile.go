package plan

import (
	"fmt"
	"math"
	"reflect"
	"strings"
)

// ProfileVersion is the profile document's "v" this build writes and reads.
// Version 2 added each role's idle CPU (*_idle_cpu_cores): a version 1
// profile has none, and is refused (CodeOldProfile) rather than planned
// without them.
const ProfileVersion = 2

// Sources of a figure.
const (
	// SourceMeasured: measured by `danmaku calibrate` on Profile.Machine.
	SourceMeasured = "measured"
	// SourceDesign: arithmetic from the design (what the code does per
	// operation), with the benchmark that confirmed it named in How.
	SourceDesign = "design"
)

// Profile is what `danmaku calibrate` writes: the per-node figures a plan
// needs, measured on one machine, and that machine.
type Profile struct {
	V int `json:"v"`
	// Taken is when the profile was measured (RFC 3339, UTC).
	Taken string `json:"taken"`
	// Command is the command line that measured it.
	Command string  `json:"command"`
	Machine Machine `json:"machine"`
	Figures Figures `json:"figures"`
}

// Machine describes where a profile was measured.
type Machine struct {
	Cores  int    `json:"cores"`
	Model  string `json:"model"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	OSArch string `json:"os_arch"`
	// LoadAvg1m is the 1-minute load average when the calibration
	// started: a shared machine's figures are worse than a quiet one's.
	LoadAvg1m float64 `json:"load_avg_1m"`
}

// Figure is one per-node figure.
type Figure struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Source is SourceMeasured or SourceDesign.
	Source string `json:"source"`
	// How says what measured it (the benchmark and its settings) or the
	// arithmetic behind it.
	How string `json:"how"`
	// Runs are the measured values the Value is the median of.
	Runs []float64 `json:"runs,omitempty"`
}

// Figures are the per-node figures. The JSON names are the "profile
// fields" a plan's lines cite.
type Figures struct {
	// Edge, plain WebSocket and with the edge terminating TLS.
	EdgeCPUUsPerFrame       Figure `json:"edge_cpu_us_per_frame"`
	EdgeCPUUsPerFrameTLS    Figure `json:"edge_cpu_us_per_frame_tls"`
	EdgeBytesPerConn        Figure `json:"edge_bytes_per_conn"`
	EdgeBytesPerConnTLS     Figure `json:"edge_bytes_per_conn_tls"`
	EdgeConnectsPerSCore    Figure `json:"edge_connects_per_s_per_core"`
	EdgeConnectsPerSCoreTLS Figure `json:"edge_connects_per_s_per_core_tls"`
	// Ingest: comments admitted a second per core through the whole
	// barrage path (token, bans, buckets, words, duplicates, audit, room
	// gate, XADD).
	IngestAdmittedPerSCore Figure `json:"ingest_admitted_per_s_per_core"`
	// gslb: entry answers a second per core (ticket checked, addresses
	// chosen, Ed25519 token signed).
	EntryAnswersPerSCore Figure `json:"entry_answers_per_s_per_core"`
	// Slicer: an idle live room's cost, and messages a second per core
	// from the streams to a written segment.
	SlicerCPUMsPerRoomS      Figure `json:"slicer_cpu_ms_per_room_s"`
	SlicerRedisCallsPerRoomS Figure `json:"slicer_redis_calls_per_room_s"`
	SlicerRedisCmdsPerRoomS  Figure `json:"slicer_redis_cmds_per_room_s"`
	SlicerMsgsPerSCore       Figure `json:"slicer_msgs_per_s_per_core"`
	// Idle CPU of one node of each role, live with no load (the slicer:
	// the leader of one idle room, or a standby), in cores: a plan adds it
	// to every node of the role, whatever its work.
	EdgeIdleCPUCores   Figure `json:"edge_idle_cpu_cores"`
	IngestIdleCPUCores Figure `json:"ingest_idle_cpu_cores"`
	GslbIdleCPUCores   Figure `json:"gslb_idle_cpu_cores"`
	SlicerIdleCPUCores Figure `json:"slicer_idle_cpu_cores"`
	// Redis, from the design.
	RedisCmdsPerAdmitted     Figure `json:"redis_cmds_per_admitted_comment"`
	RedisFlushCmdsPerRoomS   Figure `json:"redis_flush_cmds_per_room_node_s"`
	RedisCmdsPerGift         Figure `json:"redis_cmds_per_gift"`
	RedisReportCmdsPerNodeS  Figure `json:"redis_report_cmds_per_node_s"`
	RedisSyncCmdsPerGslbS    Figure `json:"redis_sync_cmds_per_gslb_s"`
	RedisOpsPerSShard        Figure `json:"redis_ops_per_s_per_shard"`
	S3PutsPerRoomSegment     Figure `json:"s3_puts_per_room_segment"`
	CDNRequestsPerViewerSeg  Figure `json:"cdn_requests_per_viewer_segment"`
	OriginGetsPerRoomSegment Figure `json:"origin_gets_per_room_segment"`
	SegmentBytesPerMessage   Figure `json:"segment_bytes_per_message"`
}

// DecodeProfile decodes and checks a profile document.
func DecodeProfile(data []byte) (*Profile, error) {
	var p Profile
	if err := decode(data, &p); err != nil {
		return nil, err
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Check refuses a profile with a figure missing, not positive or of an
// unknown source, naming the field.
func (p *Profile) Check() error {
	if p.V >= 1 && p.V < ProfileVersion {
		return fieldErr(CodeOldProfile, "v", "profile version %d has no idle CPU per role (edge_idle_cpu_cores, ingest_idle_cpu_cores, gslb_idle_cpu_cores, slicer_idle_cpu_cores), which this build's plan adds per node: re-run `danmaku calibrate` on the target machine (docs/benchmarks.md, Calibration)", p.V)
	}
	if p.V != ProfileVersion {
		return fieldErr(CodeBadVersion, "v", "profile version %d, this build reads %d", p.V, ProfileVersion)
	}
	if p.Machine.Cores < 1 {
		return fieldErr(CodeMissing, "machine.cores", "the machine's cores must be at least 1")
	}
	var err error
	p.Figures.each(func(name string, f *Figure) {
		switch {
		case err != nil:
		case !(f.Value > 0) || math.IsInf(f.Value, 0):
			err = fieldErr(CodeRange, "figures."+name+".value", "%v: a figure is a positive number", f.Value)
		case f.Source != SourceMeasured && f.Source != SourceDesign:
			err = fieldErr(CodeRange, "figures."+name+".source", "%q: measured or design", f.Source)
		case f.Unit == "":
			err = fieldErr(CodeMissing, "figures."+name+".unit", "every figure names its unit")
		}
	})
	return err
}

// each calls fn with every figure and its JSON name, in field order.
func (fs *Figures) each(fn func(name string, f *Figure)) {
	v := reflect.ValueOf(fs).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		fn(name, v.Field(i).Addr().Interface().(*Figure))
	}
}

// Each calls fn with every figure's JSON name and value, in field order.
func (fs *Figures) Each(fn func(name string, f Figure)) {
	fs.each(func(name string, f *Figure) { fn(name, *f) })
}

// Set sets the figure of JSON name to f; false for an unknown name.
func (fs *Figures) Set(name string, f Figure) bool {
	found := false
	fs.each(func(n string, p *Figure) {
		if n == name {
			*p, found = f, true
		}
	})
	return found
}

// DesignFigures are the figures no calibration measures: what the code
// does per operation, each with the benchmark that confirmed it.
func DesignFigures() map[string]Figure {
	return map[string]Figure{
		"redis_cmds_per_admitted_comment": {Value: 1, Unit: "commands/comment", Source: SourceDesign,
			How: "one XADD per stored comment; the room's flush script is counted per room and node (redis_flush_cmds_per_room_node_s). Confirmed by make bench-ingest (TestLoadRoundTrips): 1,117.9 commands per 1,000 admitted at 1,200/s, 3 nodes, 1 room = 1,000 XADD + 3 x 6.67 flushes x 6 / 1.2"},
		"redis_flush_cmds_per_room_node_s": {Value: 40, Unit: "commands/(room·node·s)", Source: SourceDesign,
			How: "each ingest node flushes each room it takes comments for once per 150 ms window: EVALSHA + TIME, HMGET, HSET, PEXPIRE, SET, GET = 6 calls x 1000/150"},
		"redis_cmds_per_gift": {Value: 9, Unit: "commands/gift", Source: SourceDesign,
			How: "ingest's appendGift script: EVALSHA, up to 3 GET, 4 SET, 1 XADD on the room's live lane (the slicer's read and ack of it are in slicer_redis_cmds_per_room_s)"},
		"redis_report_cmds_per_node_s": {Value: 16, Unit: "commands/(node·s)", Source: SourceDesign,
			How: "a loaded node's load report passes the ReportGate about 4 times a second (the keep-alive; make bench-roundtrips: 3.3-4.1), each MULTI, HSET, XADD, EXEC"},
		"redis_sync_cmds_per_gslb_s": {Value: 3200, Unit: "commands/(gslb·s)", Source: SourceDesign,
			How: "each gslb syncs the load table every 5 ms while it changes (at a show, always): a pipeline of one XRANGE on each of the table's 16 shards' change logs, 200 x 16 (20 syncs a second when the table is quiet); BenchmarkIdleGSLBCPU counted ~2,740 commands/s in the every-5ms mode"},
		"redis_ops_per_s_per_shard": {Value: 100000, Unit: "commands/s", Source: SourceDesign,
			How: "planned commands a second per Redis shard primary (one thread; small commands on a cache.r7g node). make bench runs BenchmarkRedisAppend (./internal/stream): ~229k messages/s pipelined on this machine; planned at 100k for unpipelined scripts"},
		"s3_puts_per_room_segment": {Value: 1, Unit: "PUT/segment", Source: SourceDesign,
			How: "one conditional PUT per room per segment (slicer); make bench-rooms: 1.00 segment per room per second at 1000 ms"},
		"cdn_requests_per_viewer_segment": {Value: 1, Unit: "requests/segment", Source: SourceDesign,
			How: "a viewer fetches each segment once, at its due time (make bench-latency: 100 % first-poll hits, no 404 retries): 1000/segment_ms requests a second"},
		"origin_gets_per_room_segment": {Value: 1, Unit: "GET/segment", Source: SourceDesign,
			How: "the CDN's shield asks the origin once per segment (make bench-latency through Varnish: 1.00 origin GET per segment)"},
		"segment_bytes_per_message": {Value: 110, Unit: "bytes/message", Source: SourceDesign,
			How: "msgpack segment of realistic messages (docs/benchmarks.md, Segments: 110.2 bytes/message at 60 a segment)"},
	}
}

// String is a one-line description of the machine.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores %q, %s, %s, %s", m.Cores, m.Model, m.Kernel, m.OSArch, m.Go)
}
