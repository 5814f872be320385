package plan

import (
	"fmt"
	"math"
	"regexp"
)

// EventVersion is the event document's "v" this build reads.
const EventVersion = 1

// Event describes a show to plan for.
type Event struct {
	V int `json:"v"`
	// Name is the event's short name (infra/terraform's var.event).
	Name string `json:"name"`
	// Viewers at the peak, all rooms together.
	Viewers float64 `json:"viewers"`
	// Rooms: groups of rooms alike; their viewer shares sum to 1.
	Rooms []RoomGroup `json:"rooms"`
	// CommentsPerS: comment posts a second offered at the peak, all rooms
	// together, spread over rooms as the viewers are.
	CommentsPerS float64 `json:"comments_per_s"`
	// GiftsPerS: gifts a second at the peak, spread as the viewers.
	GiftsPerS float64 `json:"gifts_per_s"`
	// GiftPushShare: the share of gifts pushed over the edge (valued at
	// min_gift_value or more); every gift also goes into the segments.
	GiftPushShare float64 `json:"gift_push_share"`
	// JoinPerS: entries (and so new edge connections) a second at the
	// show's start.
	JoinPerS float64 `json:"join_per_s"`
	// Zones: availability zones every fleet spreads over; ZonesLost of them
	// may be lost with the audience still held.
	Zones     []string `json:"zones"`
	ZonesLost int      `json:"zones_lost"`
	// Headroom: the share of a machine's CPU planned for the peak (0.7
	// leaves 30 % for the join surge's handshakes and a lost zone's
	// reconnects).
	Headroom float64 `json:"headroom"`
	// ScaleOutMargin: max_count over count (0.15: 15 % more machines may
	// be added by hand during the show).
	ScaleOutMargin float64 `json:"scale_out_margin"`
	// Budget: messages a room's segments show a second (the slicer's
	// -budget).
	Budget float64 `json:"budget"`
	// RoomRefillPerS: the room gate's refill, comments a second stored
	// per room at most (ingest's default 1200).
	RoomRefillPerS float64 `json:"room_refill_per_s"`
	// NodeTLS: edges and ingests terminate TLS (the module's
	// node_tls_secret_arn set): the edge's TLS figures apply.
	NodeTLS bool `json:"node_tls"`
	// MinGiftValue is handed to the module (min_gift_value): gifts below
	// it are not pushed; it is what makes GiftPushShare true.
	MinGiftValue int `json:"min_gift_value"`
	// Instances: the machine of each role.
	Instances Instances `json:"instances"`
	// Redis: node type and replicas per shard.
	Redis RedisSpec `json:"redis"`
}

// RoomGroup is Count rooms of one kind.
type RoomGroup struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	// ViewerShare: the share of all viewers in these rooms together,
	// split evenly among them.
	ViewerShare float64 `json:"viewer_share"`
	// SegmentMs: the rooms' segment duration: 1000, 500 or 250.
	SegmentMs int `json:"segment_ms"`
}

// Instances names each role's machine.
type Instances struct {
	Edge   Instance `json:"edge"`
	Ingest Instance `json:"ingest"`
	Gslb   Instance `json:"gslb"`
	Slicer Instance `json:"slicer"`
}

// Instance is an instance type and what it offers.
type Instance struct {
	Type       string   `json:"type"`
	VCPU       int      `json:"vcpu"`
	MemoryGiB  float64  `json:"memory_gib"`
	Alternates []string `json:"alternates"`
}

// RedisSpec is the Redis (ElastiCache) node type and replication.
type RedisSpec struct {
	NodeType         string `json:"node_type"`
	ReplicasPerShard int    `json:"replicas_per_shard"`
}

var (
	eventName    = regexp.MustCompile(`^[a-z][a-z0-9-]{1,18}[a-z0-9]$`)
	instanceName = regexp.MustCompile(`^[a-z0-9]+[a-z0-9-]*\.[a-z0-9]+$`)
)

// DecodeEvent decodes and checks an event document.
func DecodeEvent(data []byte) (*Event, error) {
	var e Event
	if err := decode(data, &e); err != nil {
		return nil, err
	}
	if err := e.Check(); err != nil {
		return nil, err
	}
	return &e, nil
}

// Check refuses an event with a field missing or out of range, naming it.
func (e *Event) Check() error {
	if e.V != EventVersion {
		return fieldErr(CodeBadVersion, "v", "event version %d, this build reads %d", e.V, EventVersion)
	}
	if !eventName.MatchString(e.Name) {
		return fieldErr(CodeRange, "name", "%q: 3-20 characters of a-z, 0-9 and '-' (infra/terraform's event)", e.Name)
	}
	pos := []struct {
		field string
		v     float64
	}{{"viewers", e.Viewers}, {"comments_per_s", e.CommentsPerS}, {"join_per_s", e.JoinPerS}, {"budget", e.Budget}, {"room_refill_per_s", e.RoomRefillPerS}}
	for _, p := range pos {
		if !(p.v > 0) || math.IsInf(p.v, 0) {
			return fieldErr(CodeMissing, p.field, "%v: a positive number", p.v)
		}
	}
	if !(e.GiftsPerS >= 0) || math.IsInf(e.GiftsPerS, 0) {
		return fieldErr(CodeRange, "gifts_per_s", "%v: 0 or more", e.GiftsPerS)
	}
	if !(e.GiftPushShare >= 0 && e.GiftPushShare <= 1) {
		return fieldErr(CodeRange, "gift_push_share", "%v: from 0 to 1", e.GiftPushShare)
	}
	if !(e.Headroom > 0 && e.Headroom <= 0.9) {
		return fieldErr(CodeRange, "headroom", "%v: above 0, at most 0.9", e.Headroom)
	}
	if !(e.ScaleOutMargin >= 0 && e.ScaleOutMargin <= 1) {
		return fieldErr(CodeRange, "scale_out_margin", "%v: from 0 to 1", e.ScaleOutMargin)
	}
	if e.MinGiftValue < 0 {
		return fieldErr(CodeRange, "min_gift_value", "%d: 0 or more", e.MinGiftValue)
	}
	if len(e.Zones) < 2 || len(e.Zones) > 6 {
		return fieldErr(CodeRange, "zones", "%d zones: 2 to 6 (infra/terraform's availability_zones)", len(e.Zones))
	}
	if e.ZonesLost < 0 || e.ZonesLost >= len(e.Zones) {
		return fieldErr(CodeRange, "zones_lost", "%d of %d zones: 0 up to one fewer than the zones", e.ZonesLost, len(e.Zones))
	}
	if len(e.Rooms) == 0 {
		return fieldErr(CodeMissing, "rooms", "at least one group of rooms")
	}
	share := 0.0
	for i, r := range e.Rooms {
		f := fmt.Sprintf("rooms[%d]", i)
		switch {
		case r.Name == "":
			return fieldErr(CodeMissing, f+".name", "every group of rooms is named")
		case r.Count < 1:
			return fieldErr(CodeRange, f+".count", "%d: at least 1", r.Count)
		case !(r.ViewerShare > 0 && r.ViewerShare <= 1):
			return fieldErr(CodeRange, f+".viewer_share", "%v: above 0, at most 1", r.ViewerShare)
		case r.SegmentMs != 1000 && r.SegmentMs != 500 && r.SegmentMs != 250:
			return fieldErr(CodeRange, f+".segment_ms", "%d: 1000, 500 or 250", r.SegmentMs)
		}
		share += r.ViewerShare
	}
	if math.Abs(share-1) > 1e-6 {
		return fieldErr(CodeRange, "rooms", "the viewer shares sum to %v, not 1", share)
	}
	for _, in := range []struct {
		field string
		i     Instance
	}{{"instances.edge", e.Instances.Edge}, {"instances.ingest", e.Instances.Ingest}, {"instances.gslb", e.Instances.Gslb}, {"instances.slicer", e.Instances.Slicer}} {
		switch {
		case !instanceName.MatchString(in.i.Type):
			return fieldErr(CodeRange, in.field+".type", "%q: an instance type such as c6in.4xlarge", in.i.Type)
		case in.i.VCPU < 1:
			return fieldErr(CodeRange, in.field+".vcpu", "%d: at least 1", in.i.VCPU)
		case !(in.i.MemoryGiB > 0):
			return fieldErr(CodeRange, in.field+".memory_gib", "%v: a positive number", in.i.MemoryGiB)
		}
		for j, a := range in.i.Alternates {
			if !instanceName.MatchString(a) {
				return fieldErr(CodeRange, fmt.Sprintf("%s.alternates[%d]", in.field, j), "%q: an instance type", a)
			}
		}
	}
	if len(e.Redis.NodeType) < 7 || e.Redis.NodeType[:6] != "cache." {
		return fieldErr(CodeRange, "redis.node_type", "%q: an ElastiCache node type (cache.…)", e.Redis.NodeType)
	}
	if e.Redis.ReplicasPerShard < 1 || e.Redis.ReplicasPerShard > 5 {
		return fieldErr(CodeRange, "redis.replicas_per_shard", "%d: 1 to 5", e.Redis.ReplicasPerShard)
	}
	return nil
}
