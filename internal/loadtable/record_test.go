package loadtable

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_900_000_000_123)
	for _, l := range []NodeLoad{
		{ID: "e1", Kind: KindEdge, Addr: "wss://e1.example:443/ws?x=a|b", Line: "telecom", Region: "cn-east", Conns: 91234, Capacity: 100000, CPU: 0.62, Draining: true, At: at},
		{ID: "i1", Kind: KindIngest, Addr: "", At: at},
		{ID: "i2", Kind: KindIngest, CPU: 1, At: at},
	} {
		b, err := encodeRecord(nil, &l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(l.ID, string(b))
		if err != nil || got != l {
			t.Fatalf("round trip of %+v: %+v, %v (record %q)", l, got, err, b)
		}
	}
}

func TestDecodeRecordRefuses(t *testing.T) {
	for _, rec := range []string{
		"", "v1", "v2|e|1|1|1|0|0|||a", "v1|x|1|1|1|0|0|||a", "v1|e|t|1|1|0|0|||a",
		"v1|e|1|-1|1|0|0|||a", "v1|e|1|1|x|0|0|||a", "v1|e|1|1|1|NaN|0|||a", "v1|e|1|1|1|-0.5|0|||a",
		"v1|e|1|1|1|0|2|||a", "v1|e|1|1|1|0|0||a", "{\"id\":\"e1\"}",
	} {
		if l, err := decodeRecord("n", rec); err == nil {
			t.Errorf("decodeRecord(%q) = %+v, want an error", rec, l)
		}
	}
}

// FuzzDecodeRecord: any stored value either fails to decode or decodes to
// a report that encodes back to the same record — never a panic, never a
// report the allocator would misread (negative counts, NaN CPU).
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range []string{"v1|e|1900000000123|5|10|0.5|0|telecom|cn|ws://a", "v1|i|0|0|0|0|1|||", "v1|e|1|1|1|+Inf|0|||x|y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rec string) {
		l, err := decodeRecord("n", rec)
		if err != nil {
			return
		}
		if l.Conns < 0 || l.Capacity < 0 || l.CPU != l.CPU || l.CPU < 0 || strings.Contains(l.Line, "|") || strings.Contains(l.Region, "|") {
			t.Fatalf("decodeRecord(%q) = %+v", rec, l)
		}
		b, err := encodeRecord(nil, &l)
		if err != nil {
			t.Fatalf("re-encode of %+v: %v", l, err)
		}
		again, err := decodeRecord("n", string(b))
		if err != nil || again != l {
			t.Fatalf("%q → %+v → %q → %+v, %v", rec, l, b, again, err)
		}
	})
}

// FuzzDecodeOnline: online records decode to valid rooms and non-negative
// counts, or fail.
func FuzzDecodeOnline(f *testing.F) {
	for _, s := range []string{"", "r1=5,r2=7", "r1=5,r1=6", "a=-1", "=3", "r1=5,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rec string) {
		rooms, err := decodeOnline(rec)
		if err != nil {
			return
		}
		for room, n := range rooms {
			if n < 0 || room == "" || strings.ContainsAny(room, "=,") {
				t.Fatalf("decodeOnline(%q) = %v", rec, rooms)
			}
		}
		again, err := decodeOnline(encodeOnline(rooms))
		if err != nil || !maps.Equal(again, dropZero(rooms)) {
			t.Fatalf("%q → %v → %v, %v", rec, rooms, again, err)
		}
	})
}

func dropZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}
