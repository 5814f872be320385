package httpx

import (
	"net/http"
	"strings"
	"time"
)

// CodePreconditionFailed answers an If-Match or If-Unmodified-Since that
// the resource does not meet.
const CodePreconditionFailed = "precondition_failed"

// Precondition is what a request's conditional headers make of it.
type Precondition int

// The outcomes of EvaluatePreconditions.
const (
	// Proceed: answer as if the request had no conditions.
	Proceed Precondition = iota
	// NotModified: answer 304 with the validators and no body.
	NotModified
	// PreconditionFailed: answer 412 (CodePreconditionFailed).
	PreconditionFailed
)

// EvaluatePreconditions applies a GET or HEAD's preconditions to a resource
// that exists, with etag and (zero: unknown) modified, in the order of RFC
// 9110 13.2.2: If-Match, else If-Unmodified-Since; then If-None-Match, else
// If-Modified-Since. If-None-Match uses the weak comparison, so a cache
// revalidating with W/"…", a list of the tags it holds, or "*" gets its
// 304. A handler that evaluates them itself, rather than leaving them to
// http.ServeContent, answers a failed precondition with the coded error
// instead of ServeContent's empty 412.
func EvaluatePreconditions(h http.Header, etag string, modified time.Time) Precondition {
	if im := h.Values("If-Match"); len(im) > 0 {
		if !MatchETag(im, etag, true) {
			return PreconditionFailed
		}
	} else if t, ok := headerTime(h, "If-Unmodified-Since"); ok && !modified.IsZero() && modified.Truncate(time.Second).After(t) {
		return PreconditionFailed
	}
	if inm := h.Values("If-None-Match"); len(inm) > 0 {
		if MatchETag(inm, etag, false) {
			return NotModified
		}
		return Proceed
	}
	if t, ok := headerTime(h, "If-Modified-Since"); ok && !modified.IsZero() && !modified.Truncate(time.Second).After(t) {
		return NotModified
	}
	return Proceed
}

// headerTime parses an HTTP date; an invalid one is ignored (RFC 9110
// 13.1.3).
func headerTime(h http.Header, name string) (time.Time, bool) {
	v := h.Get(name)
	if v == "" {
		return time.Time{}, false
	}
	t, err := http.ParseTime(v)
	return t, err == nil
}

// MatchETag reports whether the field values (each "*" or a list of entity
// tags, possibly over several header lines) name etag. strong asks for the
// strong comparison (If-Match): both tags strong and equal. Otherwise the
// weak one: equal opaque tags, W/ or not. An unparsable member ends the
// list, as in net/http: what precedes it still counts.
func MatchETag(values []string, etag string, strong bool) bool {
	ours, ourWeak, ok := parseETag(etag)
	if !ok {
		return false
	}
	for _, v := range values {
		for {
			v = strings.TrimLeft(v, " \t,")
			if v == "" {
				break
			}
			if v[0] == '*' {
				return true
			}
			end := tagEnd(v)
			if end < 0 {
				break
			}
			tag, weak, _ := parseETag(v[:end])
			if tag == ours && (!strong || (!weak && !ourWeak)) {
				return true
			}
			v = v[end:]
		}
	}
	return false
}

// tagEnd is the length of the entity tag that starts s, or -1.
func tagEnd(s string) int {
	start := 0
	if strings.HasPrefix(s, "W/") {
		start = 2
	}
	if len(s) < start+2 || s[start] != '"' {
		return -1
	}
	i := strings.IndexByte(s[start+1:], '"')
	if i < 0 {
		return -1
	}
	return start + 1 + i + 1
}

// parseETag splits an entity tag into its opaque tag (quotes included) and
// whether it is weak.
func parseETag(s string) (tag string, weak, ok bool) {
	if tagEnd(s) != len(s) {
		return "", false, false
	}
	if strings.HasPrefix(s, "W/") {
		return s[2:], true, true
	}
	return s, false, true
}
