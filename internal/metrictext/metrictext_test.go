package metrictext

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const text = `# TYPE a_total counter
a_total{z="1",b="x \"y\""} 3
a_total 1 1700000000000
# TYPE g gauge
g 2.5
u{k="v"} 7
# TYPE h histogram
h_bucket{le="+Inf"} 1
h_sum 1
h_count 1
`
	got, err := Parse(strings.NewReader(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Series]float64{
		{"a_total", `b="x \"y\"",z="1"`}: 3,
		{"a_total", ""}:                  1,
		{"g", ""}:                        2.5,
		{"u", `k="v"`}:                   7,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v = %v, want %v", k, got[k], v)
		}
	}
	only, err := Parse(strings.NewReader(text), func(f string) bool { return f == "g" })
	if err != nil || len(only) != 1 || only[Series{"g", ""}] != 2.5 {
		t.Errorf("want g only: %v %v", only, err)
	}
	if _, err := Parse(strings.NewReader(`x{k="v} 1`+"\n"), nil); err == nil {
		t.Error("unterminated label value accepted")
	}
}
