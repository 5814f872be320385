package lines

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
)

// maxCIDRFile bounds the operator file: a full-table ISP list is a few MB;
// anything far beyond that is a mistake that should not eat the gslb's memory.
const maxCIDRFile = 64 << 20

// ErrCIDRFile is wrapped by every parse error of the CIDR file; the message
// names the file and the line number.
var ErrCIDRFile = errors.New("bad CIDR file")

// cidrEntry is what one line of the file says about its prefix.
type cidrEntry struct {
	line   string // "" when the file said "-": unknown, served by BGP nodes
	region string
	// dbRegion: the file gave no region, so the database's region for the
	// address is used; the file is usually about lines, the database about
	// geography.
	dbRegion bool
}

// u128 is an address as a 128-bit number, so that IPv4 and IPv6 share the
// table code; IPv4 values use only the low 32 bits.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// next returns a+1 and false when a was the largest value.
func (a u128) next() (u128, bool) {
	lo, carry := bits.Add64(a.lo, 1, 0)
	hi, over := bits.Add64(a.hi, 0, carry)
	return u128{hi, lo}, over == 0
}

// prev returns a-1; callers never pass 0.
func (a u128) prev() u128 {
	lo, borrow := bits.Sub64(a.lo, 1, 0)
	return u128{a.hi - borrow, lo}
}

func key4(ip netip.Addr) u128 {
	b := ip.As4()
	return u128{0, uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}
}

func key6(ip netip.Addr) u128 {
	b := ip.As16()
	var k u128
	for i := 0; i < 8; i++ {
		k.hi = k.hi<<8 | uint64(b[i])
		k.lo = k.lo<<8 | uint64(b[8+i])
	}
	return k
}

// span is a closed address range [lo, hi] that maps to entries[e].
type span struct {
	lo, hi u128
	e      uint32
}

// cidrTable answers longest-prefix matches by binary search over disjoint
// ranges: nested prefixes are flattened when the file is loaded, so a lookup
// is ~log2(n) comparisons, no allocation, no pointer chasing.
type cidrTable struct {
	v4, v6   []span
	entries  []cidrEntry
	prefixes int // lines with a prefix, for logs
}

// lookup returns the entry of the longest prefix holding ip (already
// unmapped), or nil.
func (t *cidrTable) lookup(ip netip.Addr) *cidrEntry {
	var spans []span
	var k u128
	if ip.Is4() {
		spans, k = t.v4, key4(ip)
	} else {
		spans, k = t.v6, key6(ip)
	}
	// Find the last span with lo <= k.
	lo, hi := 0, len(spans)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.less(spans[m].lo) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return nil
	}
	s := &spans[lo-1]
	if s.hi.less(k) {
		return nil
	}
	return &t.entries[s.e]
}

// parseCIDRFile reads the operator file. Each line is
//
//	PREFIX LINE [REGION]
//
// with '#' starting a comment. PREFIX is an IPv4 or IPv6 CIDR (or a bare
// address, a single host) with no host bits set; ::ffff:a.b.c.d/96+n is read
// as the IPv4 prefix a.b.c.d/n, since lookups unmap addresses. LINE and
// REGION are names (ValidName) or "-" for none. Every error names the file
// and the line.
func parseCIDRFile(name string, b []byte) (*cidrTable, error) {
	if len(b) > maxCIDRFile {
		return nil, fmt.Errorf("%s: %w: %d bytes, more than %d", name, ErrCIDRFile, len(b), maxCIDRFile)
	}
	t := &cidrTable{}
	names := interner{}
	entryOf := map[cidrEntry]uint32{}
	var v4, v6 []span
	firstAt := map[netip.Prefix]int{} // prefix → line number, to name both lines of a duplicate
	for n := 1; len(b) > 0; n++ {
		var raw []byte
		raw, b, _ = bytes.Cut(b, []byte{'\n'})
		if i := bytes.IndexByte(raw, '#'); i >= 0 {
			raw = raw[:i]
		}
		f := strings.Fields(string(raw))
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %w: %s", name, n, ErrCIDRFile, fmt.Sprintf(format, args...))
		}
		if len(f) > 3 || len(f) < 2 {
			return nil, bad("want PREFIX LINE [REGION], got %d fields", len(f))
		}
		p, err := parsePrefix(f[0])
		if err != nil {
			return nil, bad("%v", err)
		}
		if at, dup := firstAt[p]; dup {
			return nil, bad("prefix %s already listed on line %d", p, at)
		}
		firstAt[p] = n
		var e cidrEntry
		if f[1] != "-" {
			if err := checkName("line", f[1]); err != nil {
				return nil, bad("%v", err)
			}
			e.line = names.get(f[1])
		}
		switch {
		case len(f) < 3:
			e.dbRegion = true
		case f[2] != "-":
			if err := checkName("region", f[2]); err != nil {
				return nil, bad("%v", err)
			}
			e.region = names.get(f[2])
		}
		i, ok := entryOf[e]
		if !ok {
			i = uint32(len(t.entries))
			t.entries = append(t.entries, e)
			entryOf[e] = i
		}
		if p.Addr().Is4() {
			lo := key4(p.Addr())
			v4 = append(v4, span{lo: lo, hi: u128{0, lo.lo | (1<<(32-p.Bits()) - 1)}, e: i})
		} else {
			lo := key6(p.Addr())
			v6 = append(v6, span{lo: lo, hi: lastOf6(lo, p.Bits()), e: i})
		}
		t.prefixes++
	}
	t.v4, t.v6 = flatten(v4), flatten(v6)
	return t, nil
}

// parsePrefix reads a CIDR or a bare address, refusing host bits (a typo
// such as 10.1.0.0/8 more likely means /16 than 10.0.0.0/8, so it is not
// silently masked) and zones.
func parsePrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("bad prefix %q: %w", s, err)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("bad prefix %q: %w", s, err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("bad prefix %q: zones are not allowed", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("prefix %s has host bits set (did you mean %s?)", s, m)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}

// lastOf6 returns the last address of the IPv6 prefix lo/bits.
func lastOf6(lo u128, n int) u128 {
	host := u128{^uint64(0), ^uint64(0)}
	switch {
	case n >= 128:
		host = u128{}
	case n >= 64:
		host.hi = 0
		host.lo >>= n - 64
	default:
		host.hi >>= n
	}
	return u128{lo.hi | host.hi, lo.lo | host.lo}
}

// flatten turns prefixes (which either nest or are disjoint, and are
// unique) into sorted disjoint ranges where each address maps to its
// longest prefix. A sweep in address order with a stack of the prefixes
// still open: a prefix that starts inside the one on top is nested in it.
func flatten(in []span) []span {
	if len(in) == 0 {
		return nil
	}
	slices.SortFunc(in, func(a, b span) int {
		switch {
		case a.lo.less(b.lo):
			return -1
		case b.lo.less(a.lo):
			return 1
		case b.hi.less(a.hi): // same start: the wider prefix first
			return -1
		case a.hi.less(b.hi):
			return 1
		}
		return 0
	})
	out := make([]span, 0, len(in))
	var stack []span
	var cur u128   // first address not yet covered by out
	curOK := false // false once cur ran past the end of the address space
	emit := func(lo, hi u128, e uint32) {
		if hi.less(lo) {
			return
		}
		// Neighbours with the same entry merge, so a big list of adjacent
		// prefixes of one line costs one range.
		if k := len(out) - 1; k >= 0 && out[k].e == e {
			if nx, ok := out[k].hi.next(); ok && nx == lo {
				out[k].hi = hi
				return
			}
		}
		out = append(out, span{lo, hi, e})
	}
	pop := func() {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if curOK {
			emit(cur, top.hi, top.e)
		}
		cur, curOK = top.hi.next()
	}
	for _, s := range in {
		for len(stack) > 0 && stack[len(stack)-1].hi.less(s.lo) {
			pop()
		}
		if len(stack) > 0 && curOK && cur.less(s.lo) {
			emit(cur, s.lo.prev(), stack[len(stack)-1].e)
		}
		cur, curOK = s.lo, true
		stack = append(stack, s)
	}
	for len(stack) > 0 {
		pop()
	}
	return slices.Clip(out)
}
