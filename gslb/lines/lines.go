package lines

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"danmaku/internal/reload"
)

// Defaults.
const (
	defaultPoll        = 5 * time.Second
	defaultLineField   = "line"
	defaultRegionField = "region"
)

// Config configures a Classifier. The zero Config is valid: no source, every
// address unknown.
type Config struct {
	// MMDB is the path of a MaxMind DB (custom, or GeoIP2/GeoLite2 ASN, ISP,
	// City, Country, Enterprise). Empty: none.
	MMDB string
	// CIDR is the path of the operator's CIDR file; its prefixes win over
	// the database. Empty: none.
	CIDR string
	// LineField and RegionField name the record fields of a custom database
	// that hold the line and the region; a dot descends into maps
	// ("danmaku.line"). Zero: "line" and "region".
	LineField, RegionField string
	// ISPLines maps database ISP data to lines: keys "as4134" or "4134" (a
	// record's autonomous_system_number) or an ISP / organisation / AS organisation
	// name (isp, organization, autonomous_system_organization, at the top
	// level or under traits), compared without regard to case or repeated
	// spaces. Values must be valid names. Nil: only the records' own line
	// field gives lines.
	ISPLines map[string]string
	// Regions maps geo codes ("cn-bj": country and first subdivision ISO
	// codes; or "cn") to region names. Nil: the codes themselves are the
	// regions. Set: only the regions it names are reported, which bounds
	// the set of region names an ordinary GeoIP database can produce.
	Regions map[string]string
	// Poll is how often the files are checked for changes (size, modification
	// time, identity). Zero: 5 s.
	Poll time.Duration
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Classifier maps client addresses to lines and regions. It is safe for
// concurrent use; lookups read an immutable snapshot that Refresh replaces
// atomically.
type Classifier struct {
	cfg  Config
	lay  *layout
	snap atomic.Pointer[snapshot]

	mu         sync.Mutex // serialises Refresh; guards the file states
	mmdb, cidr fileState
}

// snapshot is immutable once published; a nil part is an absent source.
type snapshot struct {
	cidr *cidrTable
	db   *mmdbSource
}

// fileState is what Refresh remembers of one file.
type fileState struct {
	path   string
	loaded os.FileInfo // of the version in use; nil before the first load
	// failed and failErr remember a version that did not load, so that a
	// broken file is read once, not every poll, and stays an error (one log
	// line per outage, by reload.Every) until it changes.
	failed  os.FileInfo
	failErr error
}

// New checks cfg and loads the files once; a file that does not load is an
// error here, so a typo stops the gslb at start rather than sending every
// client to BGP nodes. It starts nothing; Run polls for changes.
func New(cfg Config) (*Classifier, error) {
	if cfg.Poll == 0 {
		cfg.Poll = defaultPoll
	}
	if cfg.Poll < 0 {
		return nil, errors.New("lines: Poll must be positive")
	}
	if cfg.LineField == "" {
		cfg.LineField = defaultLineField
	}
	if cfg.RegionField == "" {
		cfg.RegionField = defaultRegionField
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lay := &layout{isp: map[string]string{}}
	var err error
	if lay.linePath, err = fieldPath(cfg.LineField); err != nil {
		return nil, fmt.Errorf("lines: LineField: %w", err)
	}
	if lay.regionPath, err = fieldPath(cfg.RegionField); err != nil {
		return nil, fmt.Errorf("lines: RegionField: %w", err)
	}
	for k, v := range cfg.ISPLines {
		if err := checkName("line", v); err != nil {
			return nil, fmt.Errorf("lines: ISPLines[%q]: %w", k, err)
		}
		nk := normKey(k)
		if nk == "" {
			return nil, errors.New("lines: ISPLines: empty key")
		}
		if strings.Trim(nk, "0123456789") == "" {
			// A bare number can only mean an ASN; as a name it would
			// silently never match.
			nk = "as" + nk
		}
		lay.isp[nk] = v
	}
	if cfg.Regions != nil {
		lay.regions = map[string]string{}
		for k, v := range cfg.Regions {
			if err := checkName("region", v); err != nil {
				return nil, fmt.Errorf("lines: Regions[%q]: %w", k, err)
			}
			nk := strings.ToLower(strings.TrimSpace(k))
			if nk == "" {
				return nil, errors.New("lines: Regions: empty key")
			}
			lay.regions[nk] = v
		}
	}
	c := &Classifier{cfg: cfg, lay: lay, mmdb: fileState{path: cfg.MMDB}, cidr: fileState{path: cfg.CIDR}}
	c.snap.Store(&snapshot{})
	if err := c.Refresh(context.Background()); err != nil {
		return nil, err
	}
	return c, nil
}

// Lookup returns ip's line and region; "" for what is unknown. An
// IPv4-mapped IPv6 address is looked up as IPv4. It does not allocate.
func (c *Classifier) Lookup(ip netip.Addr) (line, region string) {
	if !ip.IsValid() {
		return "", ""
	}
	ip = ip.Unmap()
	s := c.snap.Load()
	if s.cidr != nil {
		if e := s.cidr.lookup(ip); e != nil {
			if e.dbRegion {
				return e.line, s.db.lookup(ip).region
			}
			return e.line, e.region
		}
	}
	p := s.db.lookup(ip)
	return p.line, p.region
}

// Line returns ip's line, "" when unknown; it fits gslb.AllocatorConfig's
// Classify. It does not allocate.
func (c *Classifier) Line(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	ip = ip.Unmap()
	s := c.snap.Load()
	if s.cidr != nil {
		if e := s.cidr.lookup(ip); e != nil {
			return e.line
		}
	}
	return s.db.lookup(ip).line
}

// Run checks the files every Poll until ctx is done and swaps in what
// changed; a file that fails to load keeps its last good version in use,
// logged once per outage.
func (c *Classifier) Run(ctx context.Context) error {
	return reload.Every(ctx, c.cfg.Poll, c.cfg.Logger, "lines", c.Refresh)
}

// Refresh reloads the files that changed since their last load (by size,
// modification time or identity, so an atomic rename is seen even when it
// keeps both). Each file keeps its last good version when its new one
// fails; the errors are returned joined. ctx cuts a long database load
// short (the file is then read again at the next call).
func (c *Classifier) Refresh(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := *c.snap.Load()
	changed := false
	var errs []error
	if b, fi, err := c.mmdb.read(); err != nil {
		errs = append(errs, fmt.Errorf("lines: mmdb: %w", err))
	} else if b != nil {
		db, err := openMMDB(ctx, b, c.lay)
		switch {
		case err != nil && ctx.Err() != nil:
			// Cut short, not broken: not remembered as a failed version.
			errs = append(errs, fmt.Errorf("lines: mmdb %s: %w", c.mmdb.path, err))
		case err != nil:
			errs = append(errs, c.mmdb.fail(fi, fmt.Errorf("lines: mmdb %s: %w", c.mmdb.path, err)))
		default:
			c.mmdb.loaded, c.mmdb.failed, c.mmdb.failErr = fi, nil, nil
			next.db, changed = db, true
			c.cfg.Logger.Info("lines: database loaded", "path", c.mmdb.path, "type", db.reader.Metadata.DatabaseType,
				"built", db.reader.Metadata.BuildTime().UTC(), "networks", db.networks, "records", len(db.byOffset),
				"pairs", len(db.pairs)-1, "rejected_names", db.rejected)
		}
	}
	if b, fi, err := c.cidr.read(); err != nil {
		errs = append(errs, fmt.Errorf("lines: cidr: %w", err))
	} else if b != nil {
		t, err := parseCIDRFile(c.cidr.path, b)
		if err != nil {
			errs = append(errs, c.cidr.fail(fi, fmt.Errorf("lines: %w", err)))
		} else {
			c.cidr.loaded, c.cidr.failed, c.cidr.failErr = fi, nil, nil
			next.cidr, changed = t, true
			c.cfg.Logger.Info("lines: CIDR file loaded", "path", c.cidr.path, "prefixes", t.prefixes,
				"ranges", len(t.v4)+len(t.v6))
		}
	}
	if changed {
		c.snap.Store(&next)
	}
	return errors.Join(errs...)
}

// read returns the file's content when it changed since its last load, nil
// when it did not (or no path is set). A version that already failed is not
// read again: its error is returned until the file changes.
func (f *fileState) read() ([]byte, os.FileInfo, error) {
	if f.path == "" {
		return nil, nil, nil
	}
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, nil, err
	}
	if same(fi, f.loaded) {
		return nil, nil, nil
	}
	if same(fi, f.failed) {
		return nil, nil, f.failErr
	}
	// Stat before reading: if the file changes while it is read, the next
	// poll sees a newer version and reads it again.
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, nil, err
	}
	return b, fi, nil
}

func (f *fileState) fail(fi os.FileInfo, err error) error {
	f.failed, f.failErr = fi, err
	return err
}

func same(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// ParseMapping reads "key=value,key=value" (a flag's value, for ISPLines
// and Regions); keys may hold spaces, values are checked by New.
func ParseMapping(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("lines: mapping item %q: want key=value", item)
		}
		m[k] = v
	}
	return m, nil
}
