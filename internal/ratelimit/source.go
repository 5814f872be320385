package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// RuleSource is where a rules document lives at run time. A Limiter reads
// it every Poll and applies a document that changed and parses; a
// document that does not parse is logged and counted, and the rules in
// force stay.
type RuleSource interface {
	// Load returns the document as it is now. ErrNoRules: there is none
	// (the Limiter keeps the rules it has).
	Load(ctx context.Context) ([]byte, error)
}

// ErrNoRules is returned by a RuleSource that holds no document yet.
var ErrNoRules = errors.New("ratelimit: no rules document")

var (
	_ RuleSource = FileSource{}
	_ RuleSource = (*MemorySource)(nil)
)

// FileSource is a rules document in a file, re-read every poll: replace it
// by write-then-rename so that no poll reads half of it (a torn read fails
// to parse and is skipped anyway).
type FileSource struct {
	Path string
}

// Load implements RuleSource.
func (f FileSource) Load(context.Context) ([]byte, error) {
	fh, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrNoRules, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: rules file: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("ratelimit: rules file: %w", err)
	}
	return b, nil
}

// MemorySource is a rules document in this process (embedded mode, tests).
type MemorySource struct {
	mu  sync.Mutex
	doc []byte
}

// Load implements RuleSource.
func (m *MemorySource) Load(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.doc == nil {
		return nil, ErrNoRules
	}
	return m.doc, nil
}

// Put checks doc and, if it parses, makes it the source's document.
func (m *MemorySource) Put(_ context.Context, doc []byte) error {
	if _, err := Parse(doc); err != nil {
		return err
	}
	m.mu.Lock()
	m.doc = append([]byte(nil), doc...)
	m.mu.Unlock()
	return nil
}
