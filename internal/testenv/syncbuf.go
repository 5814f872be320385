package testenv

import (
	"bytes"
	"context"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: the writer of a
// logger that a component's goroutines log to while the test reads it, or
// waits (WaitFor) for a line to appear.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// changed, when set, is closed by the next Write: WaitFor's wake-up.
	changed chan struct{}
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor blocks until what was written contains sub (true) or ctx ends
// (false). It wakes on each write, not on a timer: a test waits on the
// condition, however slowly a loaded machine gets there.
func (s *SyncBuffer) WaitFor(ctx context.Context, sub string) bool {
	for {
		s.mu.Lock()
		if bytes.Contains(s.b.Bytes(), []byte(sub)) {
			s.mu.Unlock()
			return true
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
