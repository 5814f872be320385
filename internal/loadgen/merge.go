package loadgen

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"
)

// Merge combines the reports of the shards of one run (`-shard i/n` in n
// processes, or `danmaku loadgen -procs n`) into the report of the whole
// run: counts and rates add up, latencies come from the merged histograms
// (exact percentiles, not averages), the timeline adds up second by
// second. Drops are the nodes' own counters, which every shard read from
// the same nodes: they are taken from the first report, not added, and
// BarrageUnaccounted is recomputed against the whole run's answers.
// "Shown by all" counts a comment that every poller of its own shard
// decoded (a shard knows only its own pollers).
//
// Every field is merged by the rule of its kind, or by the rule its
// `merge` tag names (mergeField): a field added to the report is merged
// without touching this function, and one of a kind with no rule makes
// Merge fail (TestMergeEveryField) rather than be left out.
func Merge(rs []*Report) (*Report, error) {
	if len(rs) == 0 {
		return nil, errors.New("loadgen: merge: no reports")
	}
	for i, r := range rs {
		if r == nil {
			return nil, fmt.Errorf("loadgen: merge: report %d is missing", i)
		}
		if r.Version != ReportVersion {
			return nil, fmt.Errorf("loadgen: merge: report %d has version %d, want %d", i, r.Version, ReportVersion)
		}
	}
	out := &Report{}
	for i, r := range rs {
		if err := mergeStruct(reflect.ValueOf(out).Elem(), reflect.ValueOf(r).Elem(), i == 0, "Report"); err != nil {
			return nil, fmt.Errorf("loadgen: merge: %w", err)
		}
	}
	out.derive(len(rs))
	return out, nil
}

// derive fills the fields tagged `merge:"derived"`, computed from the
// merged ones.
func (out *Report) derive(shards int) {
	out.Version = ReportVersion
	ru := &out.Run
	ru.Shards, ru.Merged = shards, shards
	out.Latency = out.Histograms.latencies()
	out.Users.deriveJoins()
	out.Generator.derive()
	s := schedule{pulse: ru.Pattern == PatternPulse, base: ru.RatePerSec, peak: ru.PulsePeakPerSec,
		ramp: time.Duration(ru.PulseRampSeconds * float64(time.Second)), hold: time.Duration(ru.PulseHoldSeconds * float64(time.Second))}
	if s.hold == 0 {
		s.hold = -1
	}
	ru.Schedule = s.String()
	load := max(ru.LoadSeconds, 1e-3)
	b := &out.Barrage
	b.AttemptedPerSec, b.OKPerSec = float64(b.Attempted)/load, float64(b.OK)/load
	for _, s := range out.Timeline {
		b.PeakPerSec = max(b.PeakPerSec, s.Attempted)
	}
	if b.Errors == nil {
		b.Errors = map[string]int64{}
	}
	out.Gifts.OKPerSec = float64(out.Gifts.Accepted+out.Gifts.DuplicateAfterRetry) / load
	if d := &out.Delivery; d.SegmentsFetched > 0 {
		d.FirstPollHitRatio = float64(d.FirstPollHits) / float64(d.SegmentsFetched)
	}
	dr := &out.Drops
	dr.Accepted = maps.Clone(dr.Accepted)
	dr.Rejected = slices.Clone(dr.Rejected)
	dr.BarrageUnaccounted = b.OK - dr.Accepted["barrage"] - dr.SilentDrops
	if out.Timeline == nil {
		out.Timeline = []Second{}
	}
}

// The merge rules a field's `merge` tag may name. Untagged, a field gets
// its kind's rule: numbers add up (mergeSum), booleans are or-ed, string
// maps of counts add up key by key, strings are the first report's,
// structs merge field by field, slices of structs element by element
// (the timeline, second by second), histograms bucket by bucket. A kind
// with no rule (a time, another slice or map) must be tagged.
const (
	mergeSum     = "sum"
	mergeMax     = "max"     // the largest (from zero: a merged figure is never below 0)
	mergeMin     = "min"     // the earliest time
	mergeFirst   = "first"   // the first report's, as is: the same in every shard
	mergeDerived = "derived" // computed from the merged fields (Report.derive)
	mergeZero    = "zero"    // left zero: means nothing for a whole run
	mergeUnion   = "union"   // a map of strings: each key's value from the first report that has it
)

var (
	timeType      = reflect.TypeFor[time.Time]()
	histDataType  = reflect.TypeFor[HistogramData]()
	countsMapType = reflect.TypeFor[map[string]int64]()
	textsMapType  = reflect.TypeFor[map[string]string]()
)

// mergeStruct merges src into dst field by field; first says src is the
// first report.
func mergeStruct(dst, src reflect.Value, first bool, path string) error {
	t := dst.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if err := mergeField(dst.Field(i), src.Field(i), f.Tag.Get("merge"), first, path+"."+f.Name); err != nil {
			return err
		}
	}
	return nil
}

// mergeField merges one field by rule (empty: its kind's).
func mergeField(dst, src reflect.Value, rule string, first bool, path string) error {
	switch rule {
	case mergeDerived, mergeZero:
		return nil
	case mergeFirst:
		if first {
			dst.Set(src)
		}
		return nil
	case mergeMax:
		return mergeExtreme(dst, src, path, false, func(a, b reflect.Value) bool { return less(a, b) })
	case mergeMin:
		return mergeExtreme(dst, src, path, first, func(a, b reflect.Value) bool { return less(b, a) })
	case mergeUnion:
		return mergeTexts(dst, src, path)
	case "", mergeSum:
	default:
		return fmt.Errorf("%s: unknown merge rule %q", path, rule)
	}
	switch {
	case dst.Type() == histDataType:
		var h Histogram
		h.Add(dst.Interface().(HistogramData))
		h.Add(src.Interface().(HistogramData))
		dst.Set(reflect.ValueOf(h.Data()))
	case dst.Type() == countsMapType:
		dst.Set(reflect.ValueOf(addCounts(dst.Interface().(map[string]int64), src.Interface().(map[string]int64))))
	case dst.Kind() == reflect.Int || dst.Kind() == reflect.Int64:
		dst.SetInt(dst.Int() + src.Int())
	case dst.Kind() == reflect.Float64:
		dst.SetFloat(dst.Float() + src.Float())
	case dst.Kind() == reflect.Bool:
		dst.SetBool(dst.Bool() || src.Bool())
	case dst.Kind() == reflect.String && rule == "":
		if first {
			dst.Set(src)
		}
	case dst.Kind() == reflect.Struct && dst.Type() != timeType:
		return mergeStruct(dst, src, first, path)
	case dst.Kind() == reflect.Slice && dst.Type().Elem().Kind() == reflect.Struct:
		return mergeElements(dst, src, path)
	default:
		return fmt.Errorf("%s: no merge rule for a %s: tag it (merge:\"first\", \"max\", ...)", path, dst.Type())
	}
	return nil
}

// mergeTexts adds to the string map dst each key of src it lacks.
func mergeTexts(dst, src reflect.Value, path string) error {
	if dst.Type() != textsMapType {
		return fmt.Errorf("%s: union of a %s, not a map of strings", path, dst.Type())
	}
	d, _ := dst.Interface().(map[string]string)
	for k, v := range src.Interface().(map[string]string) {
		if _, ok := d[k]; !ok {
			if d == nil {
				d = map[string]string{}
			}
			d[k] = v
		}
	}
	dst.Set(reflect.ValueOf(d))
	return nil
}

// mergeElements merges the slice src into dst element by element, growing
// dst to src's length.
func mergeElements(dst, src reflect.Value, path string) error {
	for i := range src.Len() {
		if i == dst.Len() {
			dst.Set(reflect.Append(dst, reflect.Zero(dst.Type().Elem())))
		}
		if err := mergeStruct(dst.Index(i), src.Index(i), false, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

// mergeExtreme sets dst to src when take says src wins, or when first.
func mergeExtreme(dst, src reflect.Value, path string, first bool, take func(dst, src reflect.Value) bool) error {
	switch dst.Kind() {
	case reflect.Int, reflect.Int64, reflect.Float64:
	default:
		if dst.Type() != timeType {
			return fmt.Errorf("%s: no max or min of a %s", path, dst.Type())
		}
	}
	if first || take(dst, src) {
		dst.Set(src)
	}
	return nil
}

// less orders two numbers or two times of the same type.
func less(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Int, reflect.Int64:
		return a.Int() < b.Int()
	case reflect.Float64:
		return a.Float() < b.Float()
	}
	return a.Interface().(time.Time).Before(b.Interface().(time.Time))
}

// addCounts adds b into a (allocating it when needed) and returns it.
func addCounts(a, b map[string]int64) map[string]int64 {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = map[string]int64{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}
