package lines

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/oschwald/maxminddb-golang/v2"
)

// pair is what a database record says: a line and a region, either "".
type pair struct{ line, region string }

// layout says which fields of a database record give the line and the
// region; see the package doc for the order in which they are tried.
type layout struct {
	linePath, regionPath []any
	isp                  map[string]string // normalised ISP key → line
	regions              map[string]string // geo code → region; nil: codes pass through
}

// geoRecord holds the standard GeoIP2/GeoLite2 fields the fallbacks read:
// ASN and ISP databases keep the ISP fields at the top level, City and
// Enterprise under traits.
type geoRecord struct {
	ispFields
	Traits  ispFields `maxminddb:"traits"`
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	Subdivisions []struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"subdivisions"`
}

type ispFields struct {
	ASN uint32 `maxminddb:"autonomous_system_number"`
	ASO string `maxminddb:"autonomous_system_organization"`
	ISP string `maxminddb:"isp"`
	Org string `maxminddb:"organization"`
}

// mmdbSource answers lookups from a MaxMind DB. Every distinct record is
// classified once when the file is loaded, so a lookup is a tree walk plus
// a map read of the record's offset: no decoding, no allocation.
type mmdbSource struct {
	reader *maxminddb.Reader
	v4only bool
	lay    *layout
	// pairs[byOffset[offset]] is the record's pair; pairs[0] is the empty
	// pair. Indexes rather than strings keep the map small: a City database
	// has a few hundred thousand records but few distinct pairs.
	byOffset map[uintptr]uint32
	pairs    []pair
	networks int // networks walked at load, for logs
	rejected int // records whose own line or region field broke the naming rule
}

// openMMDB reads the database from memory rather than a mapping of the file:
// an operator copying a new database over the old one in place would
// otherwise crash the gslb (SIGBUS) or feed it half-written data, and with no
// mapping an old snapshot needs no Close while lookups may still use it.
// The walk over every network takes seconds for a full City database, so it
// stops when ctx is done rather than hold up a shutdown.
func openMMDB(ctx context.Context, b []byte, lay *layout) (*mmdbSource, error) {
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		return nil, err
	}
	m := &mmdbSource{
		reader:   r,
		v4only:   r.Metadata.IPVersion == 4,
		lay:      lay,
		byOffset: map[uintptr]uint32{},
		pairs:    []pair{{}},
	}
	pairIdx := map[pair]uint32{{}: 0}
	names := interner{}
	for res := range r.Networks() {
		if err := res.Err(); err != nil {
			return nil, fmt.Errorf("walk networks: %w", err)
		}
		if m.networks++; m.networks%65536 == 1 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		off := res.Offset()
		if _, seen := m.byOffset[off]; seen {
			continue
		}
		p, rejected, err := lay.classify(res)
		if err != nil {
			return nil, fmt.Errorf("record of %s: %w", res.Prefix(), err)
		}
		if rejected {
			m.rejected++
		}
		p = pair{names.get(p.line), names.get(p.region)}
		i, ok := pairIdx[p]
		if !ok {
			i = uint32(len(m.pairs))
			m.pairs = append(m.pairs, p)
			pairIdx[p] = i
		}
		m.byOffset[off] = i
	}
	return m, nil
}

// lookup returns the pair for ip (unmapped); a nil source knows nothing.
func (m *mmdbSource) lookup(ip netip.Addr) pair {
	if m == nil || (m.v4only && ip.Is6()) {
		// The reader would build an error (and allocate) for IPv6 in an
		// IPv4-only database; it is simply unknown.
		return pair{}
	}
	res := m.reader.Lookup(ip)
	if !res.Found() {
		return pair{}
	}
	if i, ok := m.byOffset[res.Offset()]; ok {
		return m.pairs[i]
	}
	// A record the load did not walk to; the tree is valid (the load walked
	// all of it), so this is not expected, but answer correctly anyway.
	p, _, err := m.lay.classify(res)
	if err != nil {
		return pair{}
	}
	return p
}

// classify reads a record's line and region. rejected reports that the
// record's own line or region field was present but broke the naming rule
// (it is then ignored, and the fallbacks are tried). Only a corrupt
// database is an error; a field of an unexpected type counts as absent,
// since databases of other layouts may use these names differently.
func (l *layout) classify(res maxminddb.Result) (p pair, rejected bool, err error) {
	own := func(path []any) (string, error) {
		var s string
		if err := res.DecodePath(&s, path...); err != nil {
			return "", fatalDecode(err)
		}
		if s != "" && !ValidName(s) {
			rejected = true
			return "", nil
		}
		return s, nil
	}
	if p.line, err = own(l.linePath); err != nil {
		return pair{}, false, err
	}
	if p.region, err = own(l.regionPath); err != nil {
		return pair{}, false, err
	}
	if p.line != "" && p.region != "" {
		return p, rejected, nil
	}
	var g geoRecord
	if err := res.Decode(&g); err != nil {
		return p, rejected, fatalDecode(err)
	}
	if p.line == "" {
		p.line = l.ispLine(&g.ispFields)
		if p.line == "" {
			p.line = l.ispLine(&g.Traits)
		}
	}
	if p.region == "" {
		p.region = l.geoRegion(&g)
	}
	return p, rejected, nil
}

// fatalDecode keeps only errors that mean the database is corrupt.
func fatalDecode(err error) error {
	var bad maxminddb.InvalidDatabaseError
	if errors.As(err, &bad) {
		return err
	}
	return nil
}

// ispLine maps the record's ASN, then its ISP, organisation and AS
// organisation names, through the operator's mapping.
func (l *layout) ispLine(f *ispFields) string {
	if len(l.isp) == 0 {
		return ""
	}
	if f.ASN != 0 {
		if line, ok := l.isp["as"+strconv.FormatUint(uint64(f.ASN), 10)]; ok {
			return line
		}
	}
	for _, name := range []string{f.ISP, f.Org, f.ASO} {
		if name == "" {
			continue
		}
		if line, ok := l.isp[normKey(name)]; ok {
			return line
		}
	}
	return ""
}

// geoRegion derives "cc-sub" (ISO 3166 country and first subdivision code,
// lower case, e.g. "cn-bj") or "cc", mapped through the operator's regions
// when given.
func (l *layout) geoRegion(g *geoRecord) string {
	cc := strings.ToLower(g.Country.ISOCode)
	if cc == "" {
		return ""
	}
	codes := []string{cc}
	if len(g.Subdivisions) > 0 && g.Subdivisions[0].ISOCode != "" {
		codes = []string{cc + "-" + strings.ToLower(g.Subdivisions[0].ISOCode), cc}
	}
	for _, c := range codes {
		if l.regions == nil {
			if ValidName(c) {
				return c
			}
			continue
		}
		if r, ok := l.regions[c]; ok {
			return r
		}
	}
	return ""
}

// normKey is how mapping keys and database names are compared: case and
// surrounding or repeated spaces do not matter.
func normKey(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// fieldPath splits a dotted field name ("danmaku.line") into a DecodePath
// path.
func fieldPath(field string) ([]any, error) {
	var path []any
	for _, part := range strings.Split(field, ".") {
		if part == "" {
			return nil, fmt.Errorf("field %q: empty part", field)
		}
		path = append(path, part)
	}
	return path, nil
}
