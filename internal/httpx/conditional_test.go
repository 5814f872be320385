package httpx_test

import (
	"net/http"
	"testing"
	"time"

	"danmaku/internal/httpx"
)

func TestEvaluatePreconditions(t *testing.T) {
	const etag = `"abc"`
	mod := time.Date(2026, 12, 24, 20, 0, 0, 500e6, time.UTC) // sub-second: dates carry whole seconds
	at := func(d time.Duration) string { return mod.Truncate(time.Second).Add(d).Format(http.TimeFormat) }
	const (
		proceed            = httpx.Proceed
		notModified        = httpx.NotModified
		preconditionFailed = httpx.PreconditionFailed
	)
	tests := []struct {
		name     string
		header   http.Header
		modified time.Time
		want     httpx.Precondition
	}{
		{"no conditions", http.Header{}, mod, proceed},
		{"inm equal", http.Header{"If-None-Match": {`"abc"`}}, mod, notModified},
		{"inm other", http.Header{"If-None-Match": {`"abd"`}}, mod, proceed},
		{"inm star", http.Header{"If-None-Match": {`*`}}, mod, notModified},
		{"inm weak of ours", http.Header{"If-None-Match": {`W/"abc"`}}, mod, notModified},
		{"inm list holding ours", http.Header{"If-None-Match": {`"x", W/"y",  "abc"`}}, mod, notModified},
		{"inm list without ours", http.Header{"If-None-Match": {`"x", W/"y"`}}, mod, proceed},
		{"inm over two lines", http.Header{"If-None-Match": {`"x"`, `"abc"`}}, mod, notModified},
		{"inm unquoted is no tag", http.Header{"If-None-Match": {`abc`}}, mod, proceed},
		{"inm a quote inside another tag", http.Header{"If-None-Match": {`"x,"abc""`}}, mod, proceed},
		{"inm garbage ends the list", http.Header{"If-None-Match": {`"x", junk, "abc"`}}, mod, proceed},
		// If-None-Match decides alone: a date that would say 304 is
		// ignored when the tags say 200, and the other way round.
		{"inm miss beats ims", http.Header{"If-None-Match": {`"x"`}, "If-Modified-Since": {at(time.Hour)}}, mod, proceed},
		{"inm hit beats ims", http.Header{"If-None-Match": {`"abc"`}, "If-Modified-Since": {at(-time.Hour)}}, mod, notModified},
		{"ims same second", http.Header{"If-Modified-Since": {at(0)}}, mod, notModified},
		{"ims later", http.Header{"If-Modified-Since": {at(time.Hour)}}, mod, notModified},
		{"ims earlier", http.Header{"If-Modified-Since": {at(-time.Second)}}, mod, proceed},
		{"ims invalid", http.Header{"If-Modified-Since": {"yesterday"}}, mod, proceed},
		{"ims without a modification time", http.Header{"If-Modified-Since": {at(time.Hour)}}, time.Time{}, proceed},
		{"if-match equal", http.Header{"If-Match": {`"abc"`}}, mod, proceed},
		{"if-match star", http.Header{"If-Match": {`*`}}, mod, proceed},
		{"if-match list", http.Header{"If-Match": {`"x", "abc"`}}, mod, proceed},
		{"if-match other", http.Header{"If-Match": {`"x"`}}, mod, preconditionFailed},
		{"if-match is strong", http.Header{"If-Match": {`W/"abc"`}}, mod, preconditionFailed},
		{"if-match then inm", http.Header{"If-Match": {`"abc"`}, "If-None-Match": {`"abc"`}}, mod, notModified},
		{"if-match beats ius", http.Header{"If-Match": {`"abc"`}, "If-Unmodified-Since": {at(-time.Hour)}}, mod, proceed},
		{"ius earlier", http.Header{"If-Unmodified-Since": {at(-time.Second)}}, mod, preconditionFailed},
		{"ius same second", http.Header{"If-Unmodified-Since": {at(0)}}, mod, proceed},
		{"ius without a modification time", http.Header{"If-Unmodified-Since": {at(-time.Hour)}}, time.Time{}, proceed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpx.EvaluatePreconditions(tt.header, etag, tt.modified); got != tt.want {
				t.Fatalf("EvaluatePreconditions(%v) = %d, want %d", tt.header, got, tt.want)
			}
		})
	}
	// A weak ETag of the resource's own matches If-None-Match, never If-Match.
	if got := httpx.EvaluatePreconditions(http.Header{"If-None-Match": {`"abc"`}}, `W/"abc"`, time.Time{}); got != notModified {
		t.Errorf("weak resource, strong validator: %d", got)
	}
	if got := httpx.EvaluatePreconditions(http.Header{"If-Match": {`W/"abc"`}}, `W/"abc"`, time.Time{}); got != preconditionFailed {
		t.Errorf("weak resource, If-Match: %d", got)
	}
}

func FuzzMatchETag(f *testing.F) {
	for _, s := range []string{`*`, `"a"`, `W/"a", "b"`, `"`, `W/`, `,,"a"`, `"a"junk`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		// Never panics; a weak match is implied by a strong one.
		if httpx.MatchETag([]string{v}, `"a"`, true) && !httpx.MatchETag([]string{v}, `"a"`, false) {
			t.Fatalf("%q matches strongly but not weakly", v)
		}
	})
}
