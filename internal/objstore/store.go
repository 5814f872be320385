// Package objstore is the object storage the slicer writes segments to and
// the CDN reads from. Implementations: MemoryStore (tests), DirStore (embedded
// mode: a local directory), and the S3 store beside them. All are safe for
// concurrent use.
package objstore

import (
	"context"
	"errors"
)

// Errors.
var (
	// ErrNotFound is returned by Get for a missing key.
	ErrNotFound = errors.New("objstore: not found")
	// ErrPrecondition is returned by Put when IfNoneMatch or IfMatch fails:
	// the object exists (a segment already written) or changed (a manifest
	// moved on). It is an answer, not a failure.
	ErrPrecondition = errors.New("objstore: precondition failed")
	// ErrBadKey is returned for a key that is empty, absolute or climbs out
	// of the store with "..".
	ErrBadKey = errors.New("objstore: bad key")
)

// Object is a stored object with the headers the CDN serves it with.
type Object struct {
	Body         []byte
	ContentType  string
	CacheControl string
	ETag         string
}

// PutOptions are the conditions and headers of a Put.
type PutOptions struct {
	ContentType  string
	CacheControl string
	// IfNoneMatch, when true, writes only if the key does not exist
	// (If-None-Match: *), so an immutable segment is never overwritten.
	IfNoneMatch bool
	// IfMatch, when set, writes only if the current ETag equals it, so a
	// manifest only moves from the version the writer read.
	IfMatch string
}

// Store is an object store.
type Store interface {
	// Put writes body under key and returns the new ETag. A failed
	// condition returns ErrPrecondition.
	Put(ctx context.Context, key string, body []byte, opts PutOptions) (etag string, err error)
	// Get reads key; a missing key returns ErrNotFound.
	Get(ctx context.Context, key string) (*Object, error)
}
