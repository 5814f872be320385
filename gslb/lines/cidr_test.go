package lines

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func TestParseCIDRFile(t *testing.T) {
	good := []struct {
		name, file string
		want       map[string]cidrEntry // address → entry; absent address: no match
		miss       []string
	}{
		{"empty", "", nil, []string{"1.2.3.4", "::1"}},
		{"comments and blanks", "# header\n\n   \t\n# 1.2.3.0/24 x\n", nil, []string{"1.2.3.4"}},
		{"line and region", "203.0.113.0/24 telecom cn-east\n", map[string]cidrEntry{
			"203.0.113.0": {line: "telecom", region: "cn-east"}, "203.0.113.255": {line: "telecom", region: "cn-east"},
		}, []string{"203.0.112.255", "203.0.114.0"}},
		{"region from the database", "203.0.113.0/24 telecom", map[string]cidrEntry{
			"203.0.113.9": {line: "telecom", dbRegion: true},
		}, nil},
		{"dash means none", "203.0.113.0/24 - -\n198.51.100.0/24 - cn-x\n", map[string]cidrEntry{
			"203.0.113.9": {}, "198.51.100.1": {region: "cn-x"},
		}, nil},
		{"trailing comment, tabs, CRLF", "203.0.113.0/24\ttelecom\tcn-east # note\r\n", map[string]cidrEntry{
			"203.0.113.9": {line: "telecom", region: "cn-east"},
		}, nil},
		{"bare addresses", "198.51.100.7 mobile r1\n2001:db8::1 mobile r2\n", map[string]cidrEntry{
			"198.51.100.7": {line: "mobile", region: "r1"}, "2001:db8::1": {line: "mobile", region: "r2"},
		}, []string{"198.51.100.6", "198.51.100.8", "2001:db8::2"}},
		{"IPv6", "2001:db8::/32 unicom cn-north\n", map[string]cidrEntry{
			"2001:db8::": {line: "unicom", region: "cn-north"}, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff": {line: "unicom", region: "cn-north"},
		}, []string{"2001:db9::", "2001:db7:ffff::", "32.1.13.184"}},
		{"4in6 prefix is IPv4", "::ffff:203.0.113.0/120 telecom r\n", map[string]cidrEntry{
			"203.0.113.5": {line: "telecom", region: "r"},
		}, []string{"::ffff:203.0.113.5" /* callers unmap; the table is not asked with 4in6 */}},
		{"defaults do not cross families", "0.0.0.0/0 a4 r\n::/0 a6 r\n", map[string]cidrEntry{
			"0.0.0.0": {line: "a4", region: "r"}, "255.255.255.255": {line: "a4", region: "r"},
			"::": {line: "a6", region: "r"}, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": {line: "a6", region: "r"},
		}, nil},
		{"longest prefix", "10.0.0.0/8 a r\n10.1.0.0/16 b r\n10.1.2.0/24 c r\n10.1.2.128/25 d r\n", map[string]cidrEntry{
			"10.0.0.1": {line: "a", region: "r"}, "10.1.0.1": {line: "b", region: "r"}, "10.1.2.1": {line: "c", region: "r"},
			"10.1.2.200": {line: "d", region: "r"}, "10.1.3.0": {line: "b", region: "r"}, "10.255.255.255": {line: "a", region: "r"},
		}, []string{"11.0.0.0", "9.255.255.255"}},
		{"order in the file does not matter", "10.1.2.0/24 c r\n10.0.0.0/8 a r\n", map[string]cidrEntry{
			"10.1.2.1": {line: "c", region: "r"}, "10.1.3.1": {line: "a", region: "r"},
		}, nil},
		{"all-ones nested at the end", "ffff::/16 a r\nffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128 b r\n255.0.0.0/8 a r\n255.255.255.255/32 b r\n", map[string]cidrEntry{
			"ffff::1": {line: "a", region: "r"}, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": {line: "b", region: "r"},
			"255.255.255.254": {line: "a", region: "r"}, "255.255.255.255": {line: "b", region: "r"},
		}, nil},
		{"max-length names", "1.0.0.0/8 " + strings.Repeat("a", MaxNameLen) + " 0_r-9\n", map[string]cidrEntry{
			"1.2.3.4": {line: strings.Repeat("a", MaxNameLen), region: "0_r-9"},
		}, nil},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := parseCIDRFile("lines.txt", []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			for a, want := range tc.want {
				e := tab.lookup(netip.MustParseAddr(a))
				if e == nil || *e != want {
					t.Errorf("%s: got %+v, want %+v", a, e, want)
				}
			}
			for _, a := range tc.miss {
				if e := tab.lookup(netip.MustParseAddr(a)); e != nil {
					t.Errorf("%s: got %+v, want no match", a, *e)
				}
			}
		})
	}

	bad := []struct{ name, file, want string }{
		{"one field", "# header\n203.0.113.0/24\n", "lines.txt:2: bad CIDR file: want PREFIX LINE [REGION], got 1 fields"},
		{"four fields", "203.0.113.0/24 a b c", "lines.txt:1: bad CIDR file: want PREFIX LINE [REGION], got 4 fields"},
		{"bad prefix", "# c\n\n203.0.113.0/33 a\n", "lines.txt:3: bad CIDR file: bad prefix"},
		{"not an address", "telecom 203.0.113.0/24\n", "lines.txt:1: bad CIDR file: bad prefix \"telecom\""},
		{"host bits", "10.1.0.0/8 a", "did you mean 10.0.0.0/8?"},
		{"zone", "fe80::1%eth0 a", "lines.txt:1:"},
		{"upper case line", "10.0.0.0/8 Telecom", "lines.txt:1: bad CIDR file: line \"Telecom\": bad name"},
		{"odd characters", "10.0.0.0/8 tele\x1bcom", "bad name"},
		{"long name", "10.0.0.0/8 " + strings.Repeat("a", MaxNameLen+1), "bad name"},
		{"leading dash", "10.0.0.0/8 -x", "line \"-x\": bad name"},
		{"bad region", "10.0.0.0/8 a cn.east", "region \"cn.east\": bad name"},
		{"duplicate", "10.0.0.0/8 a\n\n10.0.0.0/8 b\n", "lines.txt:3: bad CIDR file: prefix 10.0.0.0/8 already listed on line 1"},
		{"duplicate through 4in6", "10.0.0.0/8 a\n::ffff:10.0.0.0/104 b\n", "already listed on line 1"},
	}
	for _, tc := range bad {
		t.Run("bad/"+tc.name, func(t *testing.T) {
			_, err := parseCIDRFile("lines.txt", []byte(tc.file))
			if err == nil {
				t.Fatal("parsed")
			}
			if !errors.Is(err, ErrCIDRFile) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q and wrap ErrCIDRFile", err, tc.want)
			}
		})
	}
}

// bruteLookup is the definition the flattened table must match: the
// longest listed prefix holding ip.
func bruteLookup(prefixes []netip.Prefix, ip netip.Addr) (int, bool) {
	best, bits := -1, -1
	for i, p := range prefixes {
		if p.Contains(ip) && p.Bits() > bits {
			best, bits = i, p.Bits()
		}
	}
	return best, best >= 0
}

// TestCIDRTableMatchesBruteForce: random nested and adjacent prefixes in a
// small corner of each family, checked address by address.
func TestCIDRTableMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var file strings.Builder
		var prefixes []netip.Prefix
		seen := map[netip.Prefix]bool{}
		for range rng.IntN(12) + 1 {
			var p netip.Prefix
			if rng.IntN(2) == 0 {
				a := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(4)), byte(rng.IntN(256))})
				p = netip.PrefixFrom(a, 14+rng.IntN(19)).Masked()
			} else {
				var b [16]byte
				b[0], b[1], b[14], b[15] = 0x20, 0x01, byte(rng.IntN(4)), byte(rng.IntN(256))
				p = netip.PrefixFrom(netip.AddrFrom16(b), 110+rng.IntN(19)).Masked()
			}
			if seen[p] {
				continue
			}
			seen[p] = true
			prefixes = append(prefixes, p)
			file.WriteString(p.String() + " l" + string(rune('a'+len(prefixes)-1)) + " r\n")
		}
		tab, err := parseCIDRFile("rand", []byte(file.String()))
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			var ip netip.Addr
			if rng.IntN(2) == 0 {
				ip = netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(5)), byte(rng.IntN(256))})
			} else {
				var b [16]byte
				b[0], b[1], b[14], b[15] = 0x20, 0x01, byte(rng.IntN(5)), byte(rng.IntN(256))
				ip = netip.AddrFrom16(b)
			}
			i, ok := bruteLookup(prefixes, ip)
			e := tab.lookup(ip)
			switch {
			case !ok && e != nil:
				t.Fatalf("file:\n%s%s: got %q, want no match", file.String(), ip, e.line)
			case ok && (e == nil || e.line != "l"+string(rune('a'+i))):
				t.Fatalf("file:\n%s%s: got %+v, want line of %s", file.String(), ip, e, prefixes[i])
			}
		}
	}
}

// FuzzParseCIDRFile: any input parses or fails with a located error, never
// panics; what parses answers lookups like the brute-force definition.
func FuzzParseCIDRFile(f *testing.F) {
	for _, s := range []string{
		"203.0.113.0/24 telecom cn-east\n",
		"# c\n10.0.0.0/8 a\n10.1.0.0/16 b r # x\n10.1.2.3 - -\n",
		"::/0 a\n2001:db8::/32 b r\nffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128 c\n",
		"::ffff:10.0.0.0/104 a\n0.0.0.0/0 b\n255.255.255.255/32 c\n",
		"10.0.0.0/8 a\n10.0.0.0/8 b\n",
		"10.1.0.0/8 A\r\n",
		"fe80::1%eth0 a\n",
	} {
		f.Add([]byte(s))
	}
	probes := []netip.Addr{
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.1.2.3"),
		netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("255.255.255.255"),
		netip.MustParseAddr("::"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := parseCIDRFile("fuzz.txt", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.txt:") || !errors.Is(err, ErrCIDRFile) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// Re-read the prefixes the way the parser does, for the oracle.
		var prefixes []netip.Prefix
		var lines []string
		for _, raw := range strings.Split(string(b), "\n") {
			raw, _, _ = strings.Cut(raw, "#")
			fs := strings.Fields(raw)
			if len(fs) == 0 {
				continue
			}
			p, err := parsePrefix(fs[0])
			if err != nil {
				t.Fatalf("parser accepted %q: %v", fs[0], err)
			}
			if fs[1] == "-" {
				fs[1] = ""
			}
			prefixes, lines = append(prefixes, p), append(lines, fs[1])
		}
		for _, ip := range append(probes, prefixesEdges(prefixes)...) {
			i, ok := bruteLookup(prefixes, ip)
			e := tab.lookup(ip)
			if ok != (e != nil) || (ok && e.line != lines[i]) {
				t.Fatalf("%s: got %+v, want match=%v line %q", ip, e, ok, lines[min(max(i, 0), len(lines)-1)])
			}
			if e != nil && (e.line != "" && !ValidName(e.line) || e.region != "" && !ValidName(e.region)) {
				t.Fatalf("%s: invalid name in %+v", ip, e)
			}
		}
	})
}

// prefixesEdges returns the first and last address of each prefix and the
// addresses just outside them, where flattening mistakes show.
func prefixesEdges(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		first, last := p.Addr(), lastAddr(p)
		out = append(out, first, last)
		if a := first.Prev(); a.IsValid() {
			out = append(out, a)
		}
		if a := last.Next(); a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// lastAddr sets the host bits of p, byte by byte (independent of the
// table's arithmetic).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		if n := p.Bits() - 8*i; n <= 0 {
			b[i] = 0xff
		} else if n < 8 {
			b[i] |= 0xff >> n
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
