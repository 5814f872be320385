package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	linesclass "danmaku/gslb/lines"
	"danmaku/internal/httpx"
)

// One rule reads every setting of a command, from its flag and from its
// environment variable alike (docs/operations.md, "How settings are read"):
// a value that does not parse, or is out of range, stops the command with a
// message naming the flag, the variable and the form it accepts — never a
// silent default. The forms:
//
//   - a count is decimal digits with an optional sign (100000): no suffix
//     (100k), no separator (100_000), no base prefix (0x), no exponent;
//   - a number is a decimal with an optional fraction (5000, 2.5);
//   - a duration is Go's (300ms, 15s, 10m, 720h): there is no d, and 30d is
//     refused with the hours it means;
//   - a boolean is true, false, 1, 0, yes or no, in any case;
//   - an enumeration is one of its listed words, in lower case;
//   - an environment variable set to the empty string is unset.
//
// An environment variable is read when its setting is registered, and what
// does not parse is kept until settings.err, which the command calls once
// its flags are parsed: a bad variable stops the command even where a flag
// overrides it.

// setting is a flag.Value parsed by one strict rule for its flag and its
// environment variable.
type setting struct {
	name string // the flag, without its dash
	env  string // "" when the setting has no environment variable
	// want is the accepted form, as messages say it.
	want string
	// parse sets the target from s; hint, when it refuses, says why beyond
	// want ("" when want says it all).
	parse func(s string) (hint string, ok bool)
	// show is the target as text, "" when it is its type's zero value: a
	// zero setting (which flag.PrintDefaults makes to compare) shows "" too,
	// so that -h prints no "(default 0)" where the usage says the default.
	show   func() string
	isBool bool
	// gone, for a removed setting, says what replaces it: any value stops.
	gone string
	// bad are values the rule refuses, for the table test.
	bad []string
}

func (s *setting) Set(v string) error {
	if s.gone != "" {
		return fmt.Errorf("removed: %s (%s)", s.gone, s.names())
	}
	hint, ok := s.parse(v)
	if !ok {
		msg := "want " + s.want
		if hint != "" {
			msg += " — " + hint
		}
		return fmt.Errorf("%s (%s)", msg, s.names())
	}
	return nil
}

func (s *setting) String() string {
	if s == nil || s.show == nil {
		return ""
	}
	return s.show()
}

// IsBoolFlag lets a boolean setting be given as -name alone.
func (s *setting) IsBoolFlag() bool { return s.isBool }

// names is where the setting can be given.
func (s *setting) names() string {
	if s.env == "" {
		return "flag -" + s.name
	}
	return "flag -" + s.name + ", environment " + s.env
}

// settings registers a command's settings on its flag set and keeps what
// their environment variables held that did not parse.
type settings struct {
	fs   *flag.FlagSet
	errs []error
}

// add reads the setting's environment variable (before its flag, which
// overrides it) and registers the flag.
func (ss *settings) add(s *setting, usage string) {
	if s.env != "" {
		usage += " [" + s.env + "]"
		if v := os.Getenv(s.env); v != "" {
			if err := s.Set(v); err != nil {
				ss.errs = append(ss.errs, fmt.Errorf("%s=%q: %w", s.env, v, err))
			}
		}
	}
	ss.fs.Var(s, s.name, usage)
}

// err is every environment variable that did not parse, as a usage error.
func (ss *settings) err() error {
	if len(ss.errs) == 0 {
		return nil
	}
	return usageError{errors.Join(ss.errs...)}
}

// span is the counts a setting takes: lo to hi, or only the listed values.
type span struct {
	lo, hi int64
	only   []int64
}

func atLeast(lo int64) span       { return span{lo: lo, hi: math.MaxInt64} }
func between(lo, hi int64) span   { return span{lo: lo, hi: hi} }
func anyCount() span              { return span{lo: math.MinInt64, hi: math.MaxInt64} }
func oneOfCounts(v ...int64) span { return span{only: v} }

func (r span) holds(n int64) bool {
	if r.only != nil {
		for _, v := range r.only {
			if n == v {
				return true
			}
		}
		return false
	}
	return n >= r.lo && n <= r.hi
}

func (r span) want() string {
	const digits = " in decimal digits, such as 100000"
	switch {
	case r.only != nil:
		s := make([]string, len(r.only))
		for i, v := range r.only {
			s[i] = strconv.FormatInt(v, 10)
		}
		return "one of " + strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
	case r.lo == math.MinInt64 && r.hi == math.MaxInt64:
		return "a whole number" + digits
	case r.hi == math.MaxInt64:
		return fmt.Sprintf("a whole number ≥ %d%s", r.lo, digits)
	}
	return fmt.Sprintf("a whole number from %d to %d in decimal digits", r.lo, r.hi)
}

// outside are counts the span refuses, for the table test.
func (r span) outside() []string {
	if r.only != nil {
		return []string{strconv.FormatInt(slicesMax(r.only)+1, 10)}
	}
	var out []string
	if r.lo != math.MinInt64 {
		out = append(out, strconv.FormatInt(r.lo-1, 10))
	}
	if r.hi != math.MaxInt64 {
		out = append(out, strconv.FormatInt(r.hi+1, 10))
	}
	return out
}

func slicesMax(v []int64) int64 {
	m := v[0]
	for _, x := range v[1:] {
		m = max(m, x)
	}
	return m
}

// suffixed is a count written with a multiplier suffix, which the rule
// refuses: 1m is a million to some and a minute or a milli to others.
var suffixed = regexp.MustCompile(`^([0-9]+)([kKmMgG])$`)

// countVar registers a whole-number setting.
func countVar[T int | int64](ss *settings, p *T, name, env string, r span, usage string) {
	s := &setting{name: name, env: env, want: r.want()}
	s.parse = func(v string) (string, bool) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || int64(T(n)) != n {
			if suffixed.MatchString(v) {
				return "no k, m or g suffix: write the number out", false
			}
			return "", false
		}
		if !r.holds(n) {
			return "", false
		}
		*p = T(n)
		return "", true
	}
	s.show = func() string {
		if *p == 0 {
			return ""
		}
		return strconv.FormatInt(int64(*p), 10)
	}
	s.bad = append([]string{"100k", "1_000", "0x10", "1e5"}, r.outside()...)
	ss.add(s, usage)
}

// decimal is a number as the rule takes it: no exponent, NaN or infinity.
var decimal = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// numberVar registers a decimal setting (any sign).
func numberVar(ss *settings, p *float64, name, env, usage string) {
	s := &setting{name: name, env: env, want: "a decimal number (5000, 2.5)"}
	s.parse = func(v string) (string, bool) {
		if !decimal.MatchString(v) {
			return "", false
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return "", false
		}
		*p = f
		return "", true
	}
	s.show = func() string {
		if *p == 0 {
			return ""
		}
		return strconv.FormatFloat(*p, 'f', -1, 64)
	}
	s.bad = []string{"5k", "NaN", "1e3", "fast"}
	ss.add(s, usage)
}

// days is a duration written in days, which Go's durations do not have.
var days = regexp.MustCompile(`^([0-9]+)d$`)

// durationVar registers a duration setting: 0, or at least least (a
// negative duration is never taken).
func durationVar(ss *settings, p *time.Duration, name, env string, least time.Duration, usage string) {
	want := "a Go duration ≥ 0, such as 300ms, 15s, 10m or 720h"
	if least > 0 {
		want = fmt.Sprintf("0 or a Go duration of at least %s, such as %s or %s", shortDuration(least), shortDuration(24*least), shortDuration(720*least))
	}
	s := &setting{name: name, env: env, want: want}
	s.parse = func(v string) (string, bool) {
		d, err := time.ParseDuration(v)
		if err != nil {
			if m := days.FindStringSubmatch(v); m != nil {
				if n, err := strconv.Atoi(m[1]); err == nil && n <= math.MaxInt32 {
					return fmt.Sprintf("Go durations have no d: write %dh", n*24), false
				}
			}
			if strings.Contains(v, "d") {
				return "Go durations have no d: a day is 24h", false
			}
			return "", false
		}
		if d < 0 || (d > 0 && d < least) {
			return "", false
		}
		*p = d
		return "", true
	}
	s.show = func() string {
		if *p == 0 {
			return ""
		}
		return p.String()
	}
	s.bad = []string{"30d", "15", "-1s"}
	if least > 0 {
		s.bad = append(s.bad, shortDuration(least/2))
	}
	ss.add(s, usage)
}

// shortDuration is d as an operator writes it: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// boolVar registers a boolean setting.
func boolVar(ss *settings, p *bool, name, env, usage string) {
	s := &setting{name: name, env: env, want: "true, false, 1, 0, yes or no", isBool: true}
	s.parse = func(v string) (string, bool) {
		switch strings.ToLower(v) {
		case "true", "1", "yes":
			*p = true
		case "false", "0", "no":
			*p = false
		default:
			return "", false
		}
		return "", true
	}
	s.show = func() string {
		if !*p {
			return ""
		}
		return "true"
	}
	s.bad = []string{"maybe", "on", "t", "2"}
	ss.add(s, usage)
}

// enumVar registers a setting that is one of a few words (def the first
// value it holds).
func enumVar(ss *settings, p *string, name, env, def string, values []string, usage string) {
	*p = def
	want := "one of " + strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
	s := &setting{name: name, env: env, want: want}
	s.parse = func(v string) (string, bool) {
		for _, w := range values {
			if v == w {
				*p = v
				return "", true
			}
		}
		return "", false
	}
	s.show = func() string { return *p }
	s.bad = []string{"bogus", strings.ToUpper(values[0])}
	ss.add(s, usage)
}

// textVar registers a text setting with a form (a list, a mapping) that
// check holds it to; its error says what is wrong. bad is a value check
// refuses, for the table test.
func textVar(ss *settings, p *string, name, env, want string, check func(string) error, bad, usage string) {
	s := &setting{name: name, env: env, want: want}
	s.parse = func(v string) (string, bool) {
		if err := check(v); err != nil {
			return err.Error(), false
		}
		*p = v
		return "", true
	}
	s.show = func() string { return *p }
	s.bad = []string{bad}
	ss.add(s, usage)
}

// removedVar registers a setting that no longer exists: given, from its
// flag or its environment variable, it stops the command saying what
// replaced it.
func removedVar(ss *settings, name, env, instead string) {
	s := &setting{name: name, env: env, gone: instead, bad: []string{"50000"}}
	ss.add(s, "removed: "+instead)
}

// The roles' lists: what their text settings hold them to.

// splitList is a comma list's items, trimmed; nil for "".
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// checkProxies holds -trusted-proxies to addresses and CIDRs.
func checkProxies(v string) error {
	for _, p := range splitList(v) {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				return fmt.Errorf("%q is neither", p)
			}
		}
	}
	return nil
}

// checkListenAddr holds a listen address to host:port, the port a number
// (0: any free one); the host may be empty (every address).
func checkListenAddr(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("not host:port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// checkOrigins holds -cors-origins to what httpx.ParseOrigins takes.
func checkOrigins(v string) error {
	for _, o := range splitList(v) {
		if _, err := httpx.ParseOrigins([]string{o}); err != nil {
			return fmt.Errorf("%q is not one", o)
		}
	}
	return nil
}

// checkClaimValue holds a ticket claim's expected value (aud, iss) to
// what a login service writes: 1-256 printable ASCII characters, no space.
func checkClaimValue(v string) error {
	if len(v) > 256 {
		return fmt.Errorf("%d bytes, at most 256", len(v))
	}
	for _, c := range []byte(v) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%q is not printable ASCII or is a space", c)
		}
	}
	return nil
}

// parseMapping reads a key=value comma list (nil for "").
func parseMapping(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	return linesclass.ParseMapping(v)
}

func checkMapping(v string) error {
	if _, err := parseMapping(v); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "lines: "))
	}
	return nil
}
