package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// num formats v for people: thousands separated, at most 3 significant
// decimals below 10.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10 && v != float64(int64(v)):
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteTable prints the fleets with their binding constraints, then every
// line with its formula and the fields it read.
func (p *Plan) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "plan for %s: %s viewers in %s rooms, profile of %s (taken %s)\n\n", p.Event.Name, num(p.Event.Viewers), num(float64(p.roomCount())), p.Profile.Machine, p.Profile.Taken)
	fmt.Fprintln(tw, "role\tinstance\tcount\tmax_count\tcount set by\truns out first\tutilization at peak")
	for _, f := range p.Fleets {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%.0f %%\n", f.Role, f.Instance.Type, f.Count, f.MaxCount, f.Binding, f.Limit, 100*f.Utilization)
	}
	fmt.Fprintf(tw, "redis\t%s\t%d shards x %d\t\tcommands per shard\tcommands per shard\t%.0f %%\n", p.Event.Redis.NodeType, p.RedisShards, 1+p.Event.Redis.ReplicasPerShard, 100*p.RedisUtilization)
	fmt.Fprintf(tw, "\nbinds first as the load grows: %s\n\n", p.SLO.BindingRole)
	fmt.Fprintln(tw, "section\tfigure\tvalue\tunit\tformula\tfields")
	for _, l := range p.Lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Section, l.Name, num(l.Value), l.Unit, l.Formula, strings.Join(l.Fields, ", "))
	}
	return tw.Flush()
}

func (p *Plan) roomCount() int {
	n := 0
	for _, r := range p.Event.Rooms {
		n += r.Count
	}
	return n
}

// WriteTfvars writes infra/terraform's sizing variables; the site's own
// (domain, certificates, secrets, image) come from a .tfvars of the
// operator's, given first: terraform apply -var-file=site.tfvars
// -var-file=plan.tfvars.
func (p *Plan) WriteTfvars(w io.Writer, eventFile, profileFile string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sizing of %q, written by danmaku plan -event %s -profile %s\n", p.Event.Name, eventFile, profileFile)
	fmt.Fprintf(&b, "# (profile taken %s on %s). Re-run danmaku plan rather than edit.\n", p.Profile.Taken, p.Profile.Machine)
	b.WriteString("#   terraform apply -var-file=SITE.tfvars -var-file=THIS.tfvars\n")
	fmt.Fprintf(&b, "# Binds first as the load grows: %s.\n\n", p.SLO.BindingRole)
	for _, f := range p.Fleets {
		alts := make([]string, len(f.Instance.Alternates))
		for i, a := range f.Instance.Alternates {
			alts[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&b, "# %s: count set by %s; %s runs out first (%.0f %% at the peak).\n", f.Role, f.Binding, f.Limit, 100*f.Utilization)
		fmt.Fprintf(&b, "%s_fleet = { instance_type = %q, count = %d, max_count = %d, alternate_instance_types = [%s] }\n", f.Role, f.Instance.Type, f.Count, f.MaxCount, strings.Join(alts, ", "))
	}
	fmt.Fprintf(&b, "\nedge_max_conns      = %d\n", p.EdgeMaxConns)
	fmt.Fprintf(&b, "ingest_capacity     = %d\n", p.IngestCapacity)
	fmt.Fprintf(&b, "gslb_load_balancers = %d # reserve %d LCU each before the show (quota checklist)\n", p.LoadBalancers, p.LCUPerLB)
	fmt.Fprintf(&b, "\nredis_node_type          = %q\n", p.Event.Redis.NodeType)
	fmt.Fprintf(&b, "redis_shards             = %d # %s commands/s, busiest shard %s/s\n", p.RedisShards, num(p.RedisOpsPerS), num(p.RedisShardOpsS))
	fmt.Fprintf(&b, "redis_replicas_per_shard = %d\n", p.Event.Redis.ReplicasPerShard)
	fmt.Fprintf(&b, "\ndefault_segment_ms = %d\n", p.defaultSegmentMs())
	fmt.Fprintf(&b, "budget             = %d\n", int(p.Event.Budget))
	fmt.Fprintf(&b, "min_gift_value     = %d\n", p.Event.MinGiftValue)
	_, err := io.WriteString(w, b.String())
	return err
}

// defaultSegmentMs is the segment duration of most viewers.
func (p *Plan) defaultSegmentMs() int {
	by := map[int]float64{}
	best, ms := -1.0, 1000
	for _, r := range p.Event.Rooms {
		by[r.SegmentMs] += r.ViewerShare
		if by[r.SegmentMs] > best {
			best, ms = by[r.SegmentMs], r.SegmentMs
		}
	}
	return ms
}

// WriteQuota writes the quota checklist (markdown) for the runbook.
func (p *Plan) WriteQuota(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Quota checklist: %s\n\n", p.Event.Name)
	fmt.Fprintf(&b, "Written by `danmaku plan` (profile taken %s). Ask in the event's region unless said; docs/operations.md, \"Pre-show checklist\", says how far ahead.\n\n", p.Profile.Taken)
	b.WriteString("| what | the plan needs | ask for |\n|---|---|---|\n")
	var types []string
	for _, f := range p.Fleets {
		types = append(types, fmt.Sprintf("%d %s (%s)", f.Count, f.Instance.Type, f.Role))
	}
	fmt.Fprintf(&b, "| EC2 vCPU, Running On-Demand Standard instances | %s at count (%s); %s at max_count | %s |\n", num(float64(p.VCPU)), strings.Join(types, ", "), num(float64(p.VCPUMax)), num(float64(roundUp(p.VCPUMax, 100))))
	zones := len(p.Event.Zones)
	for _, f := range p.Fleets {
		fmt.Fprintf(&b, "| EC2 capacity per zone, %s (%s) | %d per zone | capacity reservation or the alternates %s |\n", f.Instance.Type, f.Role, (f.Count+zones-1)/zones, strings.Join(f.Instance.Alternates, ", "))
	}
	fmt.Fprintf(&b, "| CloudFront requests per distribution | %s/s | %s/s |\n", num(p.CDNRequestsPerS), num(float64(roundUp(int(p.CDNRequestsPerS*1.2), 100000))))
	fmt.Fprintf(&b, "| CloudFront bandwidth per distribution | %.0f Gbps | %d Gbps |\n", p.CDNGbps, roundUp(int(p.CDNGbps*1.2+1), 10))
	fmt.Fprintf(&b, "| ALB capacity reservation (LCU), per gslb load balancer | %d load balancers x %s LCU | %s LCU each, 1-2 days ahead, outside Terraform |\n", p.LoadBalancers, num(float64(p.LCUPerLB)), num(float64(p.LCUPerLB)))
	fmt.Fprintf(&b, "| ElastiCache nodes | %d (%d shards x %d) of %s | check the region's per-cluster limit (90) |\n", p.RedisNodes, p.RedisShards, 1+p.Event.Redis.ReplicasPerShard, p.Event.Redis.NodeType)
	fmt.Fprintf(&b, "| S3 PUT requests on the segments bucket | %s/s | under 3,500/s per prefix: none below that |\n", num(p.S3PutsPerS))
	fmt.Fprintf(&b, "| S3 GET requests (CDN origin) | %s/s | under 5,500/s per prefix: none below that |\n", num(p.OriginGetsPerS))
	_, err := io.WriteString(w, b.String())
	return err
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// WriteSLO writes the plan's service levels as JSON, with each machine
// role's planned CPU ("roles") for the rehearsal report to set against
// what its nodes measured.
func (p *Plan) WriteSLO(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		SLO
		Roles []RoleCPU `json:"roles"`
	}{p.SLO, p.RoleCPU})
}
