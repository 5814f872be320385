package loadgen

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMergeEveryField fills every field of a report, merges it with
// itself and checks each field by its rule: added up, kept, or derived.
// A field added to Report of a kind with no merge rule fails here (Merge
// refuses it), as does a derived one nothing computes (left zero).
func TestMergeEveryField(t *testing.T) {
	var in Report
	n := int64(0)
	fillEvery(reflect.ValueOf(&in).Elem(), &n)
	in.Version = ReportVersion
	out, err := Merge([]*Report{&in, &in})
	if err != nil {
		t.Fatal(err)
	}
	// Drops are the first report's but for what derive recomputes.
	d := &out.Drops
	if want := out.Barrage.OK - d.Accepted["barrage"] - d.SilentDrops; d.BarrageUnaccounted != want {
		t.Errorf("Drops.BarrageUnaccounted = %d, want %d", d.BarrageUnaccounted, want)
	}
	d.BarrageUnaccounted = in.Drops.BarrageUnaccounted
	checkMerged(t, reflect.ValueOf(out).Elem(), reflect.ValueOf(&in).Elem(), "", "Report")
}

// fillEvery sets every field under v to a distinct non-zero value (*n
// counts them), every map and slice to one such element.
func fillEvery(v reflect.Value, n *int64) {
	*n++
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Unix(1_800_000_000+*n, 0)))
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			fillEvery(v.Field(i), n)
		}
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		v.SetInt(*n)
	case v.Kind() == reflect.Float64:
		v.SetFloat(float64(*n))
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.Kind() == reflect.String:
		v.SetString("s")
	case v.Kind() == reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillEvery(k, n)
		fillEvery(e, n)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case v.Kind() == reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillEvery(v.Index(0), n)
	}
}

// checkMerged checks out, the merge of in with itself, field by field.
func checkMerged(t *testing.T, out, in reflect.Value, rule, path string) {
	t.Helper()
	switch {
	case rule == mergeZero:
		if !out.IsZero() {
			t.Errorf("%s = %v, want zero (merge:%q)", path, out, rule)
		}
	case rule == mergeDerived:
		if out.IsZero() {
			t.Errorf("%s is zero: nothing derives it (merge:%q)", path, rule)
		}
	case rule != "" && rule != mergeSum:
		// first, max, min: a report merged with itself keeps its value.
		if !reflect.DeepEqual(out.Interface(), in.Interface()) {
			t.Errorf("%s = %v, want %v (merge:%q)", path, out, in, rule)
		}
	case out.Type() == histDataType:
		var h Histogram
		h.Add(in.Interface().(HistogramData))
		h.Add(in.Interface().(HistogramData))
		if !reflect.DeepEqual(out.Interface(), h.Data()) {
			t.Errorf("%s = %v, want %v", path, out, h.Data())
		}
	case out.Kind() == reflect.Struct:
		for i := range out.NumField() {
			f := out.Type().Field(i)
			checkMerged(t, out.Field(i), in.Field(i), f.Tag.Get("merge"), path+"."+f.Name)
		}
	case out.Kind() == reflect.Slice:
		if out.Len() != in.Len() {
			t.Fatalf("%s has %d elements, want %d", path, out.Len(), in.Len())
		}
		for i := range out.Len() {
			checkMerged(t, out.Index(i), in.Index(i), "", path+"[]")
		}
	case out.Kind() == reflect.Map:
		for _, k := range in.MapKeys() {
			if got, want := out.MapIndex(k).Int(), 2*in.MapIndex(k).Int(); got != want {
				t.Errorf("%s[%v] = %d, want %d (added up)", path, k, got, want)
			}
		}
	case out.Kind() == reflect.Int || out.Kind() == reflect.Int64:
		if out.Int() != 2*in.Int() {
			t.Errorf("%s = %d, want %d (added up)", path, out.Int(), 2*in.Int())
		}
	case out.Kind() == reflect.Float64:
		if out.Float() != 2*in.Float() {
			t.Errorf("%s = %v, want %v (added up)", path, out.Float(), 2*in.Float())
		}
	case out.Kind() == reflect.Bool, out.Kind() == reflect.String:
		if !reflect.DeepEqual(out.Interface(), in.Interface()) {
			t.Errorf("%s = %v, want %v", path, out, in)
		}
	default:
		t.Errorf("%s: a %s, which this test cannot check: teach it", path, out.Type())
	}
}

// TestMergeRefusesUnruledField: a field of a kind with no merge rule is
// an error naming it, never left out.
func TestMergeRefusesUnruledField(t *testing.T) {
	type withSet struct {
		N   int
		Set map[string]bool
	}
	var a, b withSet
	err := mergeStruct(reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem(), true, "withSet")
	if err == nil || !strings.Contains(err.Error(), "withSet.Set") {
		t.Errorf("merged a map[string]bool field: %v", err)
	}
}
