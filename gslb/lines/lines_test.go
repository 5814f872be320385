package lines_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"danmaku/gslb/lines"
	"danmaku/internal/testenv"
)

// writeMMDB builds a database of recs (CIDR → record) at path, through a
// rename so that a reload sees a new file, never a half-written one.
func writeMMDB(t testing.TB, path string, ipVersion int, recs map[string]mmdbtype.Map) {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType: "danmaku-lines-test", IPVersion: ipVersion, RecordSize: 28,
		// The fixtures use documentation ranges, which are reserved.
		IncludeReservedNetworks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for cidr, rec := range recs {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.Insert(n, rec); err != nil {
			t.Fatalf("insert %s: %v", cidr, err)
		}
	}
	var buf bytes.Buffer
	if _, err := tree.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, buf.Bytes())
}

// writeFile replaces path by rename, as operators are told to.
func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func lineRec(line, region string) mmdbtype.Map {
	m := mmdbtype.Map{}
	if line != "" {
		m["line"] = mmdbtype.String(line)
	}
	if region != "" {
		m["region"] = mmdbtype.String(region)
	}
	return m
}

// cityRec looks like a GeoIP2 City/Enterprise record, names and all, so the
// fallbacks skip what they do not read.
func cityRec(cc, sub string, asn uint32, org string) mmdbtype.Map {
	m := mmdbtype.Map{
		"city":      mmdbtype.Map{"geoname_id": mmdbtype.Uint32(1), "names": mmdbtype.Map{"en": mmdbtype.String("Somewhere"), "zh-CN": mmdbtype.String("某地")}},
		"continent": mmdbtype.Map{"code": mmdbtype.String("AS")},
		"country":   mmdbtype.Map{"iso_code": mmdbtype.String(cc), "names": mmdbtype.Map{"en": mmdbtype.String("Country")}},
		"location":  mmdbtype.Map{"latitude": mmdbtype.Float64(31.2), "longitude": mmdbtype.Float64(121.5)},
	}
	if sub != "" {
		m["subdivisions"] = mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String(sub)}}
	}
	if asn != 0 || org != "" {
		m["traits"] = mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(asn), "autonomous_system_organization": mmdbtype.String(org)}
	}
	return m
}

func asnRec(asn uint32, org string) mmdbtype.Map {
	return mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(asn), "autonomous_system_organization": mmdbtype.String(org)}
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

type want struct{ ip, line, region string }

func check(t *testing.T, c *lines.Classifier, ws ...want) {
	t.Helper()
	for _, w := range ws {
		line, region := c.Lookup(ip(w.ip))
		if line != w.line || region != w.region {
			t.Errorf("Lookup(%s) = %q, %q; want %q, %q", w.ip, line, region, w.line, w.region)
		}
		if got := c.Line(ip(w.ip)); got != w.line {
			t.Errorf("Line(%s) = %q; want %q", w.ip, got, w.line)
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestNoSources(t *testing.T) {
	c, err := lines.New(lines.Config{})
	if err != nil {
		t.Fatal(err)
	}
	check(t, c, want{"203.0.113.1", "", ""}, want{"2001:db8::1", "", ""})
	if line, region := c.Lookup(netip.Addr{}); line != "" || region != "" {
		t.Errorf("zero Addr: %q %q", line, region)
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDatabaseLayouts(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  lines.Config
		ipv  int
		recs map[string]mmdbtype.Map
		want []want
	}{
		{
			name: "custom line and region",
			recs: map[string]mmdbtype.Map{
				"203.0.113.0/24":    lineRec("telecom", "cn-east"),
				"198.51.100.0/24":   lineRec("unicom", ""),
				"192.0.2.0/24":      lineRec("", "cn-west"),
				"2001:db8:1::/48":   lineRec("mobile", "cn-south"),
				"2001:db8:bad::/48": lineRec("Bad Line", "ok"),
			},
			want: []want{
				{"203.0.113.7", "telecom", "cn-east"},
				{"198.51.100.7", "unicom", ""},
				{"192.0.2.7", "", "cn-west"},
				{"2001:db8:1::5", "mobile", "cn-south"},
				{"::ffff:203.0.113.7", "telecom", "cn-east"}, // unmapped first
				{"2001:db8:bad::1", "", "ok"},                // invalid name ignored
				{"2001:db8:2::1", "", ""},
				{"100.64.0.1", "", ""},
			},
		},
		{
			name: "nested custom fields",
			cfg:  lines.Config{LineField: "danmaku.line", RegionField: "danmaku.region"},
			recs: map[string]mmdbtype.Map{
				"203.0.113.0/24": {"danmaku": lineRec("telecom", "cn-east"), "line": mmdbtype.String("ignored")},
			},
			want: []want{{"203.0.113.1", "telecom", "cn-east"}},
		},
		{
			name: "ASN database through ISPLines",
			cfg:  lines.Config{ISPLines: map[string]string{"AS4134": "telecom", "China  UNICOM ": "unicom", "64501": "edu"}},
			recs: map[string]mmdbtype.Map{
				"203.0.113.0/24":  asnRec(4134, "CHINANET-BACKBONE"),
				"198.51.100.0/24": asnRec(4837, "China Unicom"),
				"192.0.2.0/24":    asnRec(64500, "Someone Else"),
				"100.64.0.0/10":   asnRec(64501, "Campus"),
			},
			want: []want{
				{"203.0.113.1", "telecom", ""},
				{"198.51.100.1", "unicom", ""}, // by name, case and spaces aside
				{"192.0.2.1", "", ""},
				{"100.64.0.1", "edu", ""}, // a bare number is an ASN
			},
		},
		{
			name: "ISP database names",
			cfg:  lines.Config{ISPLines: map[string]string{"China Mobile": "mobile"}},
			recs: map[string]mmdbtype.Map{
				"203.0.113.0/24": {"isp": mmdbtype.String("China Mobile"), "organization": mmdbtype.String("China Mobile Guangdong")},
				// the wrong type in a field: absent, not an error
				"198.51.100.0/24": {"isp": mmdbtype.Uint32(7), "line": mmdbtype.Uint32(3)},
			},
			want: []want{{"203.0.113.1", "mobile", ""}, {"198.51.100.1", "", ""}},
		},
		{
			name: "City database: traits and geo codes",
			cfg:  lines.Config{ISPLines: map[string]string{"as4134": "telecom"}},
			recs: map[string]mmdbtype.Map{
				"203.0.113.0/24":  cityRec("CN", "SH", 4134, "CHINANET"),
				"198.51.100.0/24": cityRec("CN", "", 0, ""),
				"192.0.2.0/24":    cityRec("DE", "B!", 1, "x"), // bad subdivision code: country only
			},
			want: []want{{"203.0.113.1", "telecom", "cn-sh"}, {"198.51.100.1", "", "cn"}, {"192.0.2.1", "", "de"}},
		},
		{
			name: "City database through Regions",
			cfg:  lines.Config{Regions: map[string]string{"cn-sh": "cn-east", "CN": "cn-other"}},
			recs: map[string]mmdbtype.Map{
				"203.0.113.0/24":  cityRec("CN", "SH", 0, ""),
				"198.51.100.0/24": cityRec("CN", "XJ", 0, ""),
				"192.0.2.0/24":    cityRec("DE", "BE", 0, ""),
			},
			want: []want{{"203.0.113.1", "", "cn-east"}, {"198.51.100.1", "", "cn-other"}, {"192.0.2.1", "", ""}},
		},
		{
			name: "IPv4-only database",
			ipv:  4,
			recs: map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("telecom", "cn-east")},
			want: []want{{"203.0.113.1", "telecom", "cn-east"}, {"::ffff:203.0.113.1", "telecom", "cn-east"}, {"2001:db8::1", "", ""}},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, string(rune('a'+i))+".mmdb")
			ipv := tc.ipv
			if ipv == 0 {
				ipv = 6
			}
			writeMMDB(t, path, ipv, tc.recs)
			cfg := tc.cfg
			cfg.MMDB, cfg.Logger = path, quiet()
			c, err := lines.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			check(t, c, tc.want...)
		})
	}
}

func TestCIDRWinsOverDatabase(t *testing.T) {
	dir := t.TempDir()
	db, cidr := filepath.Join(dir, "lines.mmdb"), filepath.Join(dir, "lines.txt")
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{
		"203.0.113.0/24":  lineRec("telecom", "cn-east"),
		"198.51.100.0/24": lineRec("unicom", "cn-north"),
		"192.0.2.0/24":    lineRec("mobile", "cn-south"),
		"2001:db8::/32":   lineRec("telecom", "cn-east"),
	})
	writeFile(t, cidr, []byte(`# operator overrides
203.0.113.128/25   mobile  cn-west   # a block the database has wrong
203.0.113.192/26   edu     -         # longer still, no region
198.51.100.0/24    cernet            # line only: the database's region
192.0.2.0/24       -                 # forced to BGP nodes
2001:db8:42::/48   unicom  cn-north
10.0.0.0/8         private lan
`))
	c, err := lines.New(lines.Config{MMDB: db, CIDR: cidr, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	check(t, c,
		want{"203.0.113.1", "telecom", "cn-east"}, // database
		want{"203.0.113.130", "mobile", "cn-west"},
		want{"203.0.113.200", "edu", ""},
		want{"::ffff:203.0.113.200", "edu", ""},
		want{"198.51.100.9", "cernet", "cn-north"},
		want{"192.0.2.9", "", "cn-south"},
		want{"2001:db8::1", "telecom", "cn-east"},
		want{"2001:db8:42::1", "unicom", "cn-north"},
		want{"10.1.2.3", "private", "lan"}, // the file alone
		want{"100.64.0.1", "", ""},
	)
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	badCIDR := filepath.Join(dir, "bad.txt")
	writeFile(t, badCIDR, []byte("10.0.0.0/8 ok\n10.0.0.0/33 x\n"))
	notDB := filepath.Join(dir, "not.mmdb")
	writeFile(t, notDB, []byte("this is not a database"))
	for _, tc := range []struct {
		name string
		cfg  lines.Config
		want string
	}{
		{"missing CIDR file", lines.Config{CIDR: filepath.Join(dir, "nope.txt")}, "lines: cidr: stat"},
		{"bad CIDR file", lines.Config{CIDR: badCIDR}, badCIDR + ":2: bad CIDR file: bad prefix"},
		{"missing database", lines.Config{MMDB: filepath.Join(dir, "nope.mmdb")}, "lines: mmdb: stat"},
		{"not a database", lines.Config{MMDB: notDB}, "lines: mmdb " + notDB},
		{"bad mapped line", lines.Config{ISPLines: map[string]string{"as1": "Telecom"}}, `ISPLines["as1"]: line "Telecom": bad name`},
		{"empty mapping key", lines.Config{ISPLines: map[string]string{" ": "telecom"}}, "empty key"},
		{"bad region", lines.Config{Regions: map[string]string{"cn": "cn east"}}, "bad name"},
		{"empty region key", lines.Config{Regions: map[string]string{"": "cn-east"}}, "Regions: empty key"},
		{"bad field", lines.Config{LineField: "a..b"}, "LineField"},
		{"negative poll", lines.Config{Poll: -time.Second}, "Poll"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lines.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseMapping(t *testing.T) {
	m, err := lines.ParseMapping(" as4134=telecom, China Mobile = mobile,,")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["as4134"] != "telecom" || m["China Mobile"] != "mobile" {
		t.Errorf("got %v", m)
	}
	for _, s := range []string{"as4134", "=x", "a="} {
		if _, err := lines.ParseMapping(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

func TestRefresh(t *testing.T) {
	dir := t.TempDir()
	db, cidr := filepath.Join(dir, "lines.mmdb"), filepath.Join(dir, "lines.txt")
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("telecom", "cn-east")})
	writeFile(t, cidr, []byte("198.51.100.0/24 unicom cn-north\n"))
	c, err := lines.New(lines.Config{MMDB: db, CIDR: cidr, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check(t, c, want{"203.0.113.1", "telecom", "cn-east"}, want{"198.51.100.1", "unicom", "cn-north"})

	// New versions of both files are seen.
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("mobile", "cn-south")})
	writeFile(t, cidr, []byte("198.51.100.0/24 edu\n"))
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, c, want{"203.0.113.1", "mobile", "cn-south"}, want{"198.51.100.1", "edu", ""})

	// A broken CIDR file keeps its last good version, and the database
	// still reloads beside it.
	writeFile(t, cidr, []byte("198.51.100.0/24 edu\nnot a prefix\n"))
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("telecom", "cn-east")})
	err = c.Refresh(ctx)
	if err == nil || !strings.Contains(err.Error(), cidr+":2:") || !errors.Is(err, lines.ErrCIDRFile) {
		t.Fatalf("Refresh: got %v, want the CIDR file's line 2", err)
	}
	check(t, c, want{"203.0.113.1", "telecom", "cn-east"}, want{"198.51.100.1", "edu", ""})
	// It stays an error until the file changes.
	if err := c.Refresh(ctx); err == nil {
		t.Fatal("second Refresh of the broken file succeeded")
	}

	// A truncated database (a copy in progress) keeps the last good one;
	// the CIDR file, fixed, reloads.
	good, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, db, good[:len(good)/2])
	writeFile(t, cidr, []byte("198.51.100.0/24 unicom cn-north\n"))
	if err := c.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "lines: mmdb "+db) {
		t.Fatalf("Refresh: got %v, want the database's error", err)
	}
	check(t, c, want{"203.0.113.1", "telecom", "cn-east"}, want{"198.51.100.1", "unicom", "cn-north"})

	// The file removed: the last good data stays.
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err == nil {
		t.Fatal("Refresh without the database succeeded")
	}
	check(t, c, want{"203.0.113.1", "telecom", "cn-east"})

	// Unchanged files are not read again: no error, nothing changes.
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("telecom", "cn-east")})
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshCancelled: a database load cut short by ctx keeps the old data
// and is not remembered as a broken version.
func TestRefreshCancelled(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lines.mmdb")
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("telecom", "")})
	c, err := lines.New(lines.Config{MMDB: db, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("mobile", "")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Refresh(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh: got %v, want context.Canceled", err)
	}
	check(t, c, want{"203.0.113.1", "telecom", ""})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(t, c, want{"203.0.113.1", "mobile", ""})
}

// TestRefreshInPlace: a rewrite that keeps the file (same inode) is seen by
// its size or modification time.
func TestRefreshInPlace(t *testing.T) {
	cidr := filepath.Join(t.TempDir(), "lines.txt")
	if err := os.WriteFile(cidr, []byte("198.51.100.0/24 unicom\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := lines.New(lines.Config{CIDR: cidr, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	// Same size, so only the modification time tells; set it, since two
	// writes may fall in one tick of the file system's clock.
	if err := os.WriteFile(cidr, []byte("198.51.100.0/24 mobile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute)
	if err := os.Chtimes(cidr, future, future); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(t, c, want{"198.51.100.1", "mobile", ""})
}

// TestRun: the poll loop picks up a change, and a broken file is logged
// once however many polls see it. It runs in a synctest bubble: the polls
// follow the fake clock, so "20 more polls" is exactly that on any machine.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cidr := filepath.Join(t.TempDir(), "lines.txt")
		writeFile(t, cidr, []byte("198.51.100.0/24 unicom\n"))
		var logs testenv.SyncBuffer
		c, err := lines.New(lines.Config{CIDR: cidr, Poll: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("timed out waiting for %s; logs:\n%s", what, logs.String())
				}
			}
		}
		writeFile(t, cidr, []byte("198.51.100.0/24 mobile\n"))
		waitFor("the new file", func() bool { return c.Line(ip("198.51.100.1")) == "mobile" })

		writeFile(t, cidr, []byte("198.51.100.0/24 Mobile\n"))
		waitFor("the failure log", func() bool { return strings.Contains(logs.String(), "lines reload failed") })
		time.Sleep(20 * time.Millisecond) // the bubble's clock: 20 more polls of the same broken file
		synctest.Wait()
		if n := strings.Count(logs.String(), "lines reload failed"); n != 1 {
			t.Errorf("failure logged %d times, want once:\n%s", n, logs.String())
		}
		if got := c.Line(ip("198.51.100.1")); got != "mobile" {
			t.Errorf("after a broken file: %q, want the last good %q", got, "mobile")
		}
		writeFile(t, cidr, []byte("198.51.100.0/24 edu\n"))
		waitFor("the fixed file", func() bool { return c.Line(ip("198.51.100.1")) == "edu" })
		waitFor("the recovery log", func() bool { return strings.Contains(logs.String(), "lines reloads again") })
	})
}

// TestConcurrentLookupsDuringReloads runs under -race: readers see either
// the old or the new data, never a mix or a torn value.
func TestConcurrentLookupsDuringReloads(t *testing.T) {
	dir := t.TempDir()
	db, cidr := filepath.Join(dir, "lines.mmdb"), filepath.Join(dir, "lines.txt")
	writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec("a", "ra")})
	writeFile(t, cidr, []byte("198.51.100.0/24 a ra\n"))
	c, err := lines.New(lines.Config{MMDB: db, CIDR: cidr, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addrs := []netip.Addr{ip("203.0.113.1"), ip("198.51.100.1"), ip("::ffff:198.51.100.1"), ip("2001:db8::1")}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := addrs[i%len(addrs)]
				line, region := c.Lookup(a)
				if a.Is6() && !a.Is4In6() {
					if line != "" || region != "" {
						t.Errorf("%s: %q %q, want unknown", a, line, region)
						return
					}
					continue
				}
				if (line != "a" || region != "ra") && (line != "b" || region != "rb") {
					t.Errorf("%s: torn or unknown answer %q %q", a, line, region)
					return
				}
				if l := c.Line(a); l != "a" && l != "b" {
					t.Errorf("%s: Line %q", a, l)
					return
				}
			}
		}()
	}
	for i := range 20 {
		n, r := "a", "ra"
		if i%2 == 0 {
			n, r = "b", "rb"
		}
		writeMMDB(t, db, 6, map[string]mmdbtype.Map{"203.0.113.0/24": lineRec(n, r)})
		writeFile(t, cidr, []byte("198.51.100.0/24 "+n+" "+r+"\n"))
		if err := c.Refresh(context.Background()); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestLookupDoesNotAllocate: the gslb classifies every entry request.
func TestLookupDoesNotAllocate(t *testing.T) {
	c := benchClassifier(t)
	for _, a := range []string{"203.0.113.1", "198.51.100.1", "192.0.2.1", "100.64.0.1", "2001:db8:1::1", "2001:db8:ffff::1", "::ffff:203.0.113.1"} {
		addr := ip(a)
		if n := testing.AllocsPerRun(100, func() { c.Lookup(addr); c.Line(addr) }); n != 0 {
			t.Errorf("%s: %v allocations per lookup", a, n)
		}
	}
}
