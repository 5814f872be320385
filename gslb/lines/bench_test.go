package lines_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maxmind/mmdbwriter/mmdbtype"

	"danmaku/gslb/lines"
)

// benchClassifier: a database of ~8k networks with City-like records and a
// CIDR file of ~2k prefixes, nested three deep, so lookups walk realistic
// depths. 203.0.113.0/24 and 2001:db8:1::/48 are in the database only,
// 198.51.100.0/24 in the file, 100.64.0.0/10 and 2001:db8:ffff::/48 nowhere.
func benchClassifier(t testing.TB) *lines.Classifier {
	t.Helper()
	dir := t.TempDir()
	recs := map[string]mmdbtype.Map{
		"203.0.113.0/24":  cityRec("CN", "SH", 4134, "CHINANET"),
		"2001:db8:1::/48": cityRec("CN", "BJ", 4837, "UNICOM"),
	}
	for i := range 8000 {
		// 8000 /24s in 11.0.0.0/8.., records shared by 40 provinces.
		recs[fmt.Sprintf("%d.%d.%d.0/24", 11+i/65536, (i/256)%256, i%256)] = cityRec("CN", fmt.Sprintf("P%d", i%40), uint32(4134+i%3), "ISP")
	}
	db := filepath.Join(dir, "bench.mmdb")
	writeMMDB(t, db, 6, recs)
	var f strings.Builder
	f.WriteString("198.51.100.0/24 cernet cn-x\n")
	for i := range 700 {
		if i < 256 {
			fmt.Fprintf(&f, "20.%d.0.0/16 telecom\n", i)
		}
		fmt.Fprintf(&f, "20.%d.%d.0/24 unicom r\n20.%d.%d.128/25 mobile r\n", i%256, i/256+1, i%256, i/256+1)
	}
	cidr := filepath.Join(dir, "bench.txt")
	writeFile(t, cidr, []byte(f.String()))
	c, err := lines.New(lines.Config{MMDB: db, CIDR: cidr, ISPLines: map[string]string{"as4134": "telecom", "as4135": "unicom", "as4837": "unicom"}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func BenchmarkLookup(b *testing.B) {
	c := benchClassifier(b)
	for _, bc := range []struct{ name, ip, line string }{
		{"mmdb-hit-v4", "203.0.113.9", "telecom"},
		{"mmdb-hit-v6", "2001:db8:1::9", "unicom"},
		{"cidr-hit", "198.51.100.9", "cernet"},
		{"cidr-hit-region-from-mmdb", "20.5.0.1", "telecom"},
		{"miss-v4", "100.64.0.1", ""},
		{"miss-v6", "2001:db8:ffff::1", ""},
	} {
		a := netip.MustParseAddr(bc.ip)
		if got := c.Line(a); got != bc.line {
			b.Fatalf("%s: line %q, want %q", bc.ip, got, bc.line)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Lookup(a)
			}
		})
	}
	// Line is what the allocator calls, from many goroutines at once.
	a := netip.MustParseAddr("203.0.113.9")
	b.Run("line-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Line(a)
			}
		})
	})
}
