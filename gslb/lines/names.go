package lines

import (
	"errors"
	"fmt"
	"strings"
)

// MaxNameLen bounds line and region names. They become metrics labels and
// keys of the allocator's per-line node lists, so a name is short and plain.
const MaxNameLen = 32

// ErrBadName is wrapped by every error about a line or region name that
// breaks the naming rule (see ValidName).
var ErrBadName = errors.New("bad name")

// ValidName reports whether s may be a line or region name: 1 to MaxNameLen
// bytes of [a-z0-9_-], starting with a letter or digit. "-" alone is not a
// name: the CIDR file uses it to mean "none".
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkName returns nil for a valid name, else an error that shows the name
// quoted (and cut short) so that a bad file cannot garble the log line.
func checkName(what, s string) error {
	if ValidName(s) {
		return nil
	}
	shown := s
	if len(shown) > MaxNameLen+8 {
		shown = shown[:MaxNameLen+8] + "…"
	}
	return fmt.Errorf("%s %q: %w: want 1-%d characters of a-z, 0-9, '_' and '-', starting with a letter or digit", what, shown, ErrBadName, MaxNameLen)
}

// interner shares one copy of each name among all entries of a load, so a
// file of 100k prefixes naming three lines holds three strings, not 100k
// substrings pinning the whole file in memory.
type interner map[string]string

func (in interner) get(s string) string {
	if v, ok := in[s]; ok {
		return v
	}
	v := strings.Clone(s)
	in[v] = v
	return v
}
