package auth

import (
	"context"
	"sync"
	"time"
)

// SecretStore is where the auth center publishes each epoch's secret and where
// every node fetches them. The Redis implementation restricts access with ACL
// users per role; the in-memory one serves embedded mode.
type SecretStore interface {
	// Publish stores the secret of epoch, to expire after ttl.
	Publish(ctx context.Context, epoch int64, secret []byte, ttl time.Duration) error
	// Fetch returns the secrets of the given epochs that exist.
	Fetch(ctx context.Context, epochs ...int64) (map[int64][]byte, error)
}

var _ SecretStore = (*MemorySecrets)(nil)

// MemorySecrets is the in-process SecretStore. Expiry is not enforced: a
// process lives far shorter than it matters, and verifiers only ask for the
// epochs around now.
type MemorySecrets struct {
	mu sync.Mutex
	m  map[int64][]byte
}

// NewMemorySecrets returns an empty store.
func NewMemorySecrets() *MemorySecrets { return &MemorySecrets{m: map[int64][]byte{}} }

// Publish implements SecretStore.
func (s *MemorySecrets) Publish(ctx context.Context, epoch int64, secret []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[epoch] = append([]byte(nil), secret...)
	return nil
}

// Fetch implements SecretStore.
func (s *MemorySecrets) Fetch(ctx context.Context, epochs ...int64) (map[int64][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int64][]byte, len(epochs))
	for _, e := range epochs {
		if v, ok := s.m[e]; ok {
			out[e] = append([]byte(nil), v...)
		}
	}
	return out, nil
}
