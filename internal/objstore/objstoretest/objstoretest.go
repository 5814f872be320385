// Package objstoretest is the conformance suite every objstore.Store
// implementation runs: the in-memory and directory stores in their package's
// tests, the S3 store against a real S3-compatible server. A store passes
// only if the slicer and the origin can rely on it exactly as on S3: headers
// kept, 404 for a missing key, conditional puts that refuse an existing
// segment (If-None-Match: *) and a manifest that moved on (If-Match), also
// under concurrent writers.
//
// Run calls newStore once per subtest, so subtests never share objects;
// newStore must return an empty store (for a shared server: a fresh bucket or
// prefix) and register its own cleanup with t.Cleanup. Subtests do not run in
// parallel with each other; the suite itself starts concurrent writers.
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"danmaku/internal/objstore"
)

// Options adjusts the suite to an implementation. The zero value runs every
// subtest and is what the in-process stores use.
type Options struct {
	// SkipBadKeys skips the subtest asserting that malformed keys ("", "/abs",
	// "a/../b", "a//b", "./a") are refused with ErrBadKey. The Store contract
	// requires it, and every implementation in this repository checks keys
	// with objstore.CheckKey before any I/O; set it only for a store that
	// fronts a backend whose key space legitimately differs (say, a read-only
	// view of a bucket written by another tool, where such keys may exist)
	// and say why next to the call.
	SkipBadKeys bool
}

// Run runs the suite with the default Options.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	t.Helper()
	RunWithOptions(t, Options{}, newStore)
}

// RunWithOptions runs the suite with opts.
func RunWithOptions(t *testing.T, opts Options, newStore func(t *testing.T) objstore.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"PutGetRoundTrip", testPutGet},
		{"OverwriteUnconditional", testOverwrite},
		{"GetMissing", testGetMissing},
		{"IfNoneMatchExisting", testIfNoneMatchExisting},
		{"IfNoneMatchNew", testIfNoneMatchNew},
		{"IfMatchCurrent", testIfMatchCurrent},
		{"IfMatchStale", testIfMatchStale},
		{"IfMatchMissing", testIfMatchMissing},
		{"ConcurrentIfNoneMatch", testConcurrentIfNoneMatch},
		{"ConcurrentIfMatch", testConcurrentIfMatch},
		{"NestedKeys", testNestedKeys},
		{"LargeBody", testLargeBody},
		{"EmptyBody", testEmptyBody},
		{"CallerOwnsBuffers", testCallerOwnsBuffers},
		{"BadKeys", func(t *testing.T, s objstore.Store) {
			if opts.SkipBadKeys {
				t.Skip("skipped by Options.SkipBadKeys")
			}
			testBadKeys(t, s)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStore(t))
		})
	}
}

const (
	segKey      = "rooms/r1/s/1700000000.msgpack"
	manifestKey = "rooms/r1/live.json"
	segCT       = "application/msgpack"
	segCC       = "public, max-age=31536000, immutable"
	manCT       = "application/json"
	manCC       = "public, max-age=1"
)

func segOpts() objstore.PutOptions {
	return objstore.PutOptions{ContentType: segCT, CacheControl: segCC}
}

func manOpts(ifMatch string) objstore.PutOptions {
	return objstore.PutOptions{ContentType: manCT, CacheControl: manCC, IfMatch: ifMatch}
}

func put(t *testing.T, s objstore.Store, key string, body []byte, opts objstore.PutOptions) string {
	t.Helper()
	etag, err := s.Put(context.Background(), key, body, opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	if etag == "" {
		t.Fatalf("Put(%q) returned an empty ETag", key)
	}
	return etag
}

func get(t *testing.T, s objstore.Store, key string) *objstore.Object {
	t.Helper()
	o, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return o
}

// expect checks the object under key: body, headers and ETag.
func expect(t *testing.T, s objstore.Store, key string, body []byte, ct, cc, etag string) {
	t.Helper()
	o := get(t, s, key)
	if !bytes.Equal(o.Body, body) {
		t.Fatalf("Get(%q) body = %q (%d bytes), want %q (%d bytes)", key, clip(o.Body), len(o.Body), clip(body), len(body))
	}
	if o.ContentType != ct {
		t.Errorf("Get(%q) ContentType = %q, want %q", key, o.ContentType, ct)
	}
	if o.CacheControl != cc {
		t.Errorf("Get(%q) CacheControl = %q, want %q", key, o.CacheControl, cc)
	}
	if o.ETag != etag {
		t.Errorf("Get(%q) ETag = %q, want %q (the one Put returned)", key, o.ETag, etag)
	}
}

func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

func expectNotFound(t *testing.T, s objstore.Store, key string) {
	t.Helper()
	o, err := s.Get(context.Background(), key)
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get(%q) = %v, %v; want ErrNotFound", key, o, err)
	}
}

func testPutGet(t *testing.T, s objstore.Store) {
	body := []byte("\x86\xa1v\x01segment bytes \x00\xff")
	etag := put(t, s, segKey, body, segOpts())
	expect(t, s, segKey, body, segCT, segCC, etag)

	// A different key keeps its own headers.
	mEtag := put(t, s, manifestKey, []byte(`{"v":1}`), manOpts(""))
	expect(t, s, manifestKey, []byte(`{"v":1}`), manCT, manCC, mEtag)
	expect(t, s, segKey, body, segCT, segCC, etag)
	if mEtag == etag {
		t.Errorf("different bodies got the same ETag %q", etag)
	}
}

func testOverwrite(t *testing.T, s objstore.Store) {
	e1 := put(t, s, manifestKey, []byte("one"), manOpts(""))
	e2 := put(t, s, manifestKey, []byte("two"), manOpts(""))
	if e1 == e2 {
		t.Fatalf("overwrite with a different body kept ETag %q", e1)
	}
	expect(t, s, manifestKey, []byte("two"), manCT, manCC, e2)
}

func testGetMissing(t *testing.T, s objstore.Store) {
	expectNotFound(t, s, segKey)
	put(t, s, "rooms/r1/s/1.msgpack", []byte("x"), segOpts())
	// Neither a sibling nor a prefix of an existing key exists.
	expectNotFound(t, s, "rooms/r1/s/2.msgpack")
	expectNotFound(t, s, "rooms/r1/s")
	expectNotFound(t, s, "rooms/r1/s/1.msgpack/x")
}

func testIfNoneMatchExisting(t *testing.T, s objstore.Store) {
	body := []byte("first writer")
	etag := put(t, s, segKey, body, segOpts())
	opts := segOpts()
	opts.IfNoneMatch = true
	opts.ContentType = "text/plain"
	opts.CacheControl = "no-store"
	if _, err := s.Put(context.Background(), segKey, []byte("deposed leader"), opts); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfNoneMatch Put on an existing key: err = %v, want ErrPrecondition", err)
	}
	expect(t, s, segKey, body, segCT, segCC, etag)
}

func testIfNoneMatchNew(t *testing.T, s objstore.Store) {
	opts := segOpts()
	opts.IfNoneMatch = true
	etag := put(t, s, segKey, []byte("new"), opts)
	expect(t, s, segKey, []byte("new"), segCT, segCC, etag)
}

func testIfMatchCurrent(t *testing.T, s objstore.Store) {
	e1 := put(t, s, manifestKey, []byte(`{"t":1}`), manOpts(""))
	e2 := put(t, s, manifestKey, []byte(`{"t":2}`), manOpts(e1))
	if e2 == e1 {
		t.Fatalf("IfMatch Put with a new body returned the old ETag %q", e1)
	}
	expect(t, s, manifestKey, []byte(`{"t":2}`), manCT, manCC, e2)
	// And again from the new version: the chain moves forward.
	e3 := put(t, s, manifestKey, []byte(`{"t":3}`), manOpts(e2))
	expect(t, s, manifestKey, []byte(`{"t":3}`), manCT, manCC, e3)
}

func testIfMatchStale(t *testing.T, s objstore.Store) {
	e1 := put(t, s, manifestKey, []byte(`{"t":1}`), manOpts(""))
	e2 := put(t, s, manifestKey, []byte(`{"t":2}`), manOpts(e1))
	if _, err := s.Put(context.Background(), manifestKey, []byte(`{"t":0}`), manOpts(e1)); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfMatch Put with a stale ETag: err = %v, want ErrPrecondition", err)
	}
	if _, err := s.Put(context.Background(), manifestKey, []byte(`{"t":0}`), manOpts(`"not-an-etag"`)); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfMatch Put with an unknown ETag: err = %v, want ErrPrecondition", err)
	}
	expect(t, s, manifestKey, []byte(`{"t":2}`), manCT, manCC, e2)
}

func testIfMatchMissing(t *testing.T, s objstore.Store) {
	// The ETag of an identical body elsewhere must not count either.
	etag := put(t, s, "rooms/r2/live.json", []byte(`{"t":1}`), manOpts(""))
	if _, err := s.Put(context.Background(), manifestKey, []byte(`{"t":1}`), manOpts(etag)); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfMatch Put on a missing key: err = %v, want ErrPrecondition", err)
	}
	expectNotFound(t, s, manifestKey)
}

// race runs fn(i) for i in [0, n) at once and returns each call's error.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// one returns the index of the only nil error, failing unless every other
// error is ErrPrecondition.
func one(t *testing.T, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, objstore.ErrPrecondition):
			t.Fatalf("writer %d: err = %v, want ErrPrecondition", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer succeeded")
	}
	return winner
}

const writers = 16

func testConcurrentIfNoneMatch(t *testing.T, s objstore.Store) {
	etags := make([]string, writers)
	errs := race(writers, func(i int) error {
		opts := segOpts()
		opts.IfNoneMatch = true
		var err error
		etags[i], err = s.Put(context.Background(), segKey, []byte("leader "+strconv.Itoa(i)), opts)
		return err
	})
	w := one(t, errs)
	expect(t, s, segKey, []byte("leader "+strconv.Itoa(w)), segCT, segCC, etags[w])
}

func testConcurrentIfMatch(t *testing.T, s objstore.Store) {
	base := put(t, s, manifestKey, []byte(`{"t":0}`), manOpts(""))
	etags := make([]string, writers)
	errs := race(writers, func(i int) error {
		var err error
		etags[i], err = s.Put(context.Background(), manifestKey, []byte(`{"t":`+strconv.Itoa(i+1)+`}`), manOpts(base))
		return err
	})
	w := one(t, errs)
	expect(t, s, manifestKey, []byte(`{"t":`+strconv.Itoa(w+1)+`}`), manCT, manCC, etags[w])
}

func testNestedKeys(t *testing.T, s objstore.Store) {
	keys := []string{
		"rooms/r1/s/1700000000.msgpack",
		"rooms/r1/s/1700000001.msgpack",
		"rooms/r1/live.json",
		"rooms/r10/live.json",
		"rooms/r1-b/s/1700000000.msgpack",
		"top",
	}
	etags := make([]string, len(keys))
	for i, k := range keys {
		etags[i] = put(t, s, k, []byte("body of "+k), segOpts())
	}
	for i, k := range keys {
		expect(t, s, k, []byte("body of "+k), segCT, segCC, etags[i])
	}
}

func testLargeBody(t *testing.T, s objstore.Store) {
	body := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(7, 11))
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	etag := put(t, s, segKey, body, segOpts())
	expect(t, s, segKey, body, segCT, segCC, etag)
}

func testEmptyBody(t *testing.T, s objstore.Store) {
	// An empty second is still written, so a poller never waits on a gap;
	// the smallest real segment is a few bytes, but the store must not care.
	opts := segOpts()
	opts.IfNoneMatch = true
	etag := put(t, s, segKey, nil, opts)
	expect(t, s, segKey, []byte{}, segCT, segCC, etag)
	if _, err := s.Put(context.Background(), segKey, []byte{}, opts); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfNoneMatch over an empty object: err = %v, want ErrPrecondition", err)
	}
}

func testCallerOwnsBuffers(t *testing.T, s objstore.Store) {
	body := []byte("original")
	etag := put(t, s, segKey, body, segOpts())
	copy(body, "XXXXXXXX") // the writer reuses its buffer
	o := get(t, s, segKey)
	if string(o.Body) != "original" {
		t.Fatalf("mutating the Put buffer changed the stored object to %q", o.Body)
	}
	copy(o.Body, "YYYYYYYY") // a reader scribbles on what it got
	expect(t, s, segKey, []byte("original"), segCT, segCC, etag)
}

func testBadKeys(t *testing.T, s objstore.Store) {
	for _, key := range []string{"", "/abs", "a/../b", "a//b", "./a", "..", "a/.", "a/", `a\b`} {
		if _, err := s.Put(context.Background(), key, []byte("x"), segOpts()); !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("Put(%q): err = %v, want ErrBadKey", key, err)
		}
		if _, err := s.Get(context.Background(), key); !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("Get(%q): err = %v, want ErrBadKey", key, err)
		}
	}
}
