package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"danmaku/internal/objstore"
)

var _ Store = (*ObjectStore)(nil)

// ObjectStore is the Store on an object store: S3 (objstore.S3Store, a
// bucket of its own: never the segments bucket the CDN serves) or a
// directory (objstore.DirStore), for a deployment that keeps its rules
// there rather than in Redis. Each version is one immutable object written
// with If-None-Match (two pushes never take one number), and the head is a
// small object moved with If-Match from the head the pusher read, so it
// only ever moves forward:
//
//	PREFIX KIND/v/0000000000000007   version 7: its record and document
//	PREFIX KIND/head                 {"head":7}
//
// A node's poll is one GET of the head (S3: about 4 GETs a second per node
// and kind). Versions older than the last KeepVersions are deleted by the
// push that makes them too old when the store can delete (objstore.Lister).
type ObjectStore struct {
	objs   objstore.Store
	prefix string
}

// NewObjectStore keeps the rules in objs under prefix ("" or ending in
// "/").
func NewObjectStore(objs objstore.Store, prefix string) *ObjectStore {
	return &ObjectStore{objs: objs, prefix: prefix}
}

// maxPushRaces bounds how often a push retries after another push took
// the number it read.
const maxPushRaces = 16

type objectHead struct {
	Head int64 `json:"head"`
}

type objectVersion struct {
	Version
	Body []byte `json:"body"`
}

func (s *ObjectStore) headKey(kind string) string { return s.prefix + kind + "/head" }

func (s *ObjectStore) versionKey(kind string, v int64) string {
	return fmt.Sprintf("%s%s/v/%016d", s.prefix, kind, v)
}

// head reads kind's head and its ETag ("" and 0: nothing pushed).
func (s *ObjectStore) head(ctx context.Context, kind string) (int64, string, error) {
	o, err := s.objs.Get(ctx, s.headKey(kind))
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("rules: %s head: %w", kind, err)
	}
	var h objectHead
	if err := json.Unmarshal(o.Body, &h); err != nil || h.Head < 1 {
		return 0, "", fmt.Errorf("rules: %s head: bad object %q", kind, o.Body)
	}
	return h.Head, o.ETag, nil
}

// Push implements Store.
func (s *ObjectStore) Push(ctx context.Context, kind string, body []byte, m Meta) (Version, error) {
	if err := checkKind(kind); err != nil {
		return Version{}, err
	}
	head, _, err := s.head(ctx, kind)
	if err != nil {
		return Version{}, err
	}
	// Take the next free number: a version object is never overwritten.
	var v Version
	for n := head + 1; ; n++ {
		if n > head+maxPushRaces {
			return Version{}, fmt.Errorf("rules: push %s: %d concurrent pushes took every number after %d", kind, maxPushRaces, head)
		}
		v = describe(n, body, m)
		rec, _ := json.Marshal(objectVersion{Version: v, Body: body}) // always marshals
		_, err := s.objs.Put(ctx, s.versionKey(kind, n), rec, objstore.PutOptions{ContentType: "application/json", IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPrecondition) {
			continue
		}
		if err != nil {
			return Version{}, fmt.Errorf("rules: push %s: %w", kind, err)
		}
		break
	}
	if err := s.advance(ctx, kind, v.Version); err != nil {
		return Version{}, err
	}
	if l, ok := s.objs.(objstore.Lister); ok && v.Version > KeepVersions {
		_ = l.Delete(ctx, s.versionKey(kind, v.Version-KeepVersions)) // the next push retries nothing: a leftover is harmless
	}
	return v, nil
}

// advance moves kind's head to n unless it is already there or past it.
func (s *ObjectStore) advance(ctx context.Context, kind string, n int64) error {
	b, _ := json.Marshal(objectHead{Head: n}) // always marshals
	for range maxPushRaces {
		cur, etag, err := s.head(ctx, kind)
		if err != nil {
			return err
		}
		if cur >= n {
			return nil
		}
		opts := objstore.PutOptions{ContentType: "application/json", IfMatch: etag, IfNoneMatch: etag == ""}
		_, err = s.objs.Put(ctx, s.headKey(kind), b, opts)
		if errors.Is(err, objstore.ErrPrecondition) {
			continue // another push moved it: look again
		}
		if err != nil {
			return fmt.Errorf("rules: push %s: head: %w", kind, err)
		}
		return nil
	}
	return fmt.Errorf("rules: push %s: the head kept moving under version %d", kind, n)
}

// Head implements Store.
func (s *ObjectStore) Head(ctx context.Context, kind string) (int64, error) {
	if err := checkKind(kind); err != nil {
		return 0, err
	}
	h, _, err := s.head(ctx, kind)
	return h, err
}

// Get implements Store.
func (s *ObjectStore) Get(ctx context.Context, kind string, version int64) (Document, error) {
	if err := checkKind(kind); err != nil {
		return Document{}, err
	}
	if version == 0 {
		h, _, err := s.head(ctx, kind)
		if err != nil {
			return Document{}, err
		}
		version = h
	}
	if version < 1 {
		return Document{}, fmt.Errorf("%w: %s version %d", ErrNoVersion, kind, version)
	}
	head, _, err := s.head(ctx, kind)
	if err != nil {
		return Document{}, err
	}
	if version > head || version <= head-KeepVersions {
		// Written but not yet in the head, or kept only until its delete.
		return Document{}, fmt.Errorf("%w: %s version %d", ErrNoVersion, kind, version)
	}
	o, err := s.objs.Get(ctx, s.versionKey(kind, version))
	if errors.Is(err, objstore.ErrNotFound) {
		return Document{}, fmt.Errorf("%w: %s version %d", ErrNoVersion, kind, version)
	}
	if err != nil {
		return Document{}, fmt.Errorf("rules: %s version %d: %w", kind, version, err)
	}
	var rec objectVersion
	if err := json.Unmarshal(o.Body, &rec); err != nil || rec.Version.Version != version {
		return Document{}, fmt.Errorf("rules: bad version record %s %d", kind, version)
	}
	return Document(rec), nil
}

// History implements Store: one GET per version listed.
func (s *ObjectStore) History(ctx context.Context, kind string, n int) ([]Version, error) {
	if err := checkKind(kind); err != nil {
		return nil, err
	}
	head, _, err := s.head(ctx, kind)
	if err != nil {
		return nil, err
	}
	var out []Version
	for v := head; v > 0 && v > head-KeepVersions && len(out) < n; v-- {
		d, err := s.Get(ctx, kind, v)
		if errors.Is(err, ErrNoVersion) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rules: %s history: %w", kind, err)
		}
		out = append(out, d.Version)
	}
	return out, nil
}
