// Package rules keeps the documents that steer every node of a fleet and
// that operators change during a show — the sensitive-word list, the
// rate-limit rules and the moderation settings — in one versioned store, so that a push reaches every
// node within a second and a bad push can be undone.
//
// A Store keeps, per kind of document, a numbered history: every push is a
// new version (1, 2, ...) with who pushed it, when, why and the body's
// digest, and the newest version is the one in force (the head). A
// rollback is a push too: it copies an older version's body into a new
// version, so that the history stays append-only and says who rolled back
// to what. The last KeepVersions versions are kept.
//
// Nodes follow the head: they read the head's number every poll (a small
// read: one hash field in Redis) and the body only when the number moved.
// The documents are checked before they are stored (API: a bad document is
// refused whole, with the field named) and again by every node when it
// loads one, so that a document written by other means never replaces the
// one in force.
//
// The in-memory Store is embedded mode's (`danmaku dev`); RedisStore is the
// fleet's by default, ObjectStore (S3 or a directory) its option. All are
// safe for concurrent use. A file remains an option for
// either kind (ingest.FileWords, ratelimit.FileSource): a node given a file
// follows the file and not the store.
package rules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Kinds of documents.
const (
	// KindWords is the sensitive-word list: one word or phrase a line
	// (ingest.ParseWordList).
	KindWords = "words"
	// KindLimits is the rate-limit rules document (ratelimit.Parse).
	KindLimits = "limits"
	// KindModeration is the ingest nodes' moderation settings, for rooms
	// whose event does not set them (ingest.ParseModeration).
	KindModeration = "moderation"
)

// Bounds.
const (
	// KeepVersions is how many versions of a kind a Store keeps; older
	// ones are deleted by the push that makes them too old.
	KeepVersions = 50
	// MaxDocument bounds a document's body: a 10,000-word list is about
	// 100 KiB, a rules document at most 256 KiB.
	MaxDocument = 1 << 20
	// maxKind bounds a kind's name.
	maxKind = 32
	// MaxNote bounds a push's note.
	MaxNote = 200
)

// Errors.
var (
	// ErrNoVersion: the version asked for does not exist (never pushed,
	// or older than the last KeepVersions), or nothing was pushed yet.
	ErrNoVersion = errors.New("rules: no such version")
	// ErrBadKind: a kind's name is not 1-32 of a-z.
	ErrBadKind = errors.New("rules: bad kind")
)

// Meta is what a push records beside the body.
type Meta struct {
	// By is who pushed: the fingerprint of the operator key the API was
	// called with ("sha256:" and 16 hex digits), never the key.
	By string `json:"by"`
	// At is when the version was pushed.
	At time.Time `json:"at"`
	// Note is the operator's reason, if given (at most MaxNote bytes).
	Note string `json:"note,omitempty"`
	// RollbackOf is the version whose body a rollback copied. Zero: a
	// push of a new body.
	RollbackOf int64 `json:"rollback_of,omitempty"`
}

// Version describes one stored version.
type Version struct {
	Version int64 `json:"version"`
	Meta
	// Size is the body's length in bytes, SHA256 its digest (hex): an
	// operator compares them with the file they pushed.
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// Document is a version and its body.
type Document struct {
	Version
	Body []byte `json:"-"`
}

// Store keeps the versions of each kind of document.
type Store interface {
	// Push stores body as kind's next version, now in force, and returns
	// it. It does not check the body: callers check it first (API).
	Push(ctx context.Context, kind string, body []byte, m Meta) (Version, error)
	// Head returns the number of kind's version in force; 0 when nothing
	// was pushed.
	Head(ctx context.Context, kind string) (int64, error)
	// Get returns a version of kind; version 0 is the head. ErrNoVersion
	// when it does not exist.
	Get(ctx context.Context, kind string, version int64) (Document, error)
	// History returns up to n of kind's newest versions, newest first.
	History(ctx context.Context, kind string, n int) ([]Version, error)
}

// ValidKind reports whether kind can name a kind of document: 1-32 of a-z.
func ValidKind(kind string) bool {
	if kind == "" || len(kind) > maxKind {
		return false
	}
	for i := 0; i < len(kind); i++ {
		if kind[i] < 'a' || kind[i] > 'z' {
			return false
		}
	}
	return true
}

func checkKind(kind string) error {
	if !ValidKind(kind) {
		return fmt.Errorf("%w: %q: want 1-%d of a-z", ErrBadKind, kind, maxKind)
	}
	return nil
}

// describe fills in what a version says of its body.
func describe(v int64, body []byte, m Meta) Version {
	sum := sha256.Sum256(body)
	return Version{Version: v, Meta: m, Size: len(body), SHA256: hex.EncodeToString(sum[:])}
}

// Rollback makes an older version of kind the one in force again, as a new
// version copying its body (m.RollbackOf is set to it). to 0: the newest
// version older than the head. ErrNoVersion when there is none. check,
// when set, is asked first: a version stored under an older check may no
// longer pass.
func Rollback(ctx context.Context, s Store, kind string, to int64, m Meta, check Check) (Version, error) {
	if to == 0 {
		head, err := s.Head(ctx, kind)
		if err != nil {
			return Version{}, err
		}
		hist, err := s.History(ctx, kind, 2)
		if err != nil {
			return Version{}, err
		}
		for _, v := range hist {
			if v.Version < head {
				to = v.Version
				break
			}
		}
		if to == 0 {
			return Version{}, fmt.Errorf("%w: %s has no version before %d", ErrNoVersion, kind, head)
		}
	}
	d, err := s.Get(ctx, kind, to)
	if err != nil {
		return Version{}, err
	}
	if check != nil {
		if err := check(d.Body); err != nil {
			return Version{}, err
		}
	}
	m.RollbackOf = to
	return s.Push(ctx, kind, d.Body, m)
}
