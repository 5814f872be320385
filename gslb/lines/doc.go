// Package lines classifies a client address into its line (ISP) and region,
// so that the gslb hands a client the nodes of its own ISP; an address no
// source knows gets line "", which the allocator serves from BGP nodes.
//
// # Sources and precedence
//
// Two optional sources, each a file re-read when it changes.
//
// The operator's CIDR file has one prefix a line:
//
//	# PREFIX              LINE     [REGION]
//	203.0.113.0/24        telecom  cn-east
//	2001:db8:100::/40     unicom   cn-north
//	198.51.100.0/24       mobile            # region from the database
//	198.51.100.128/25     -                 # none: BGP nodes
//
// '#' starts a comment. A prefix is IPv4 or IPv6 (a bare address is a single
// host) with no host bits set, listed once; ::ffff:a.b.c.d/96+n is the IPv4
// prefix a.b.c.d/n. "-" means none: a line of "-" sends the prefix to BGP
// nodes whatever the database says; a missing region is taken from the
// database. The longest prefix holding an address wins, and any prefix of the
// file wins over the database. Errors name the file and the line number.
//
// A MaxMind DB (github.com/oschwald/maxminddb-golang/v2) is the other source:
//
//   - a record's line is, first found: its own line field (Config.LineField,
//     default "line", as in a database an operator builds for lines); else,
//     through Config.ISPLines, its autonomous_system_number ("as4134"), then
//     its isp, organization and autonomous_system_organization names (GeoIP2
//     ISP, GeoLite2 ASN; under traits in City and Enterprise);
//   - its region is, first found: its own region field (Config.RegionField,
//     default "region"); else "cc-sub" from country.iso_code and the first
//     subdivisions.iso_code, or "cc" (e.g. "cn-bj", "cn"), mapped through
//     Config.Regions when set.
//
// # Names
//
// Line and region names are 1 to 32 bytes of [a-z0-9_-] starting with a
// letter or digit (ValidName): they become metrics labels and map keys, so a
// bad file cannot inject odd strings. A bad name in the CIDR file or the
// configuration is an error; in the database, the field is ignored (and
// counted in the load's log line) and the fallbacks are tried.
//
// # Cost and concurrency
//
// Lookup and Line are safe for concurrent use and do not allocate: they read
// an immutable snapshot through an atomic pointer. The CIDR file is
// flattened at load into sorted disjoint ranges (a lookup is a binary
// search); every distinct database record is classified at load, so a
// lookup is the database's tree walk and a map read — loading walks every
// network of the database once. Files are read into memory, never mapped, so
// an operator may replace them in place or by rename; a partial copy fails to
// load and is retried when it changes.
//
// Run polls the files (Config.Poll, default 5 s) by size, modification time
// and identity, loads what changed and swaps it in atomically. A file that
// fails to load keeps its last good version in use, and the failure is logged
// once until the file loads again. New loads both files once and fails if
// either does not load.
//
// # Wiring
//
// In the gslb role (internal/stack, where gslb.NewAllocator is called),
// suggested flags:
//
//	-lines-mmdb PATH        Config.MMDB                  [DANMAKU_LINES_MMDB]
//	-lines-cidr PATH        Config.CIDR                  [DANMAKU_LINES_CIDR]
//	-lines-isp  MAP         Config.ISPLines, e.g. "as4134=telecom,as4837=unicom,China Mobile=mobile"
//	-lines-regions MAP      Config.Regions,  e.g. "cn-bj=cn-north,cn-sh=cn-east"
//
// with MAP read by ParseMapping, then:
//
//	cl, err := lines.New(lines.Config{MMDB: f.linesMMDB, CIDR: f.linesCIDR, ISPLines: isp, Logger: log})
//	alloc, err := gslb.NewAllocator(gslb.AllocatorConfig{Table: t, Classify: cl.Line, Logger: log})
//	go cl.Run(ctx) // with the allocator's other background loops
//
// Without either file, leave Classify nil (every client is unknown).
package lines
