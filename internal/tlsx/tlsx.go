// Package tlsx serves TLS with a certificate pair read from two PEM files
// and re-read while the process runs, so that a renewed certificate takes
// effect without a restart (and without dropping the connections a
// restart would).
//
// A Pair is safe for concurrent use: handshakes read the current
// certificate through an atomic pointer while Run replaces it.
package tlsx

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"danmaku/internal/reload"
)

// DefaultPoll is how often Run looks at the files when Config.Poll is zero:
// renewals are planned days ahead, and reading two small files costs
// nothing, so a few seconds is prompt enough for an operator watching.
const DefaultPoll = 5 * time.Second

// ErrIncomplete is returned by New when only one of the two files is named.
var ErrIncomplete = errors.New("tlsx: a certificate needs both its certificate file and its key file")

// Config names a certificate pair.
type Config struct {
	// CertFile holds the PEM certificate chain, leaf first. Required.
	CertFile string
	// KeyFile holds the PEM private key of the leaf. Required.
	KeyFile string
	// Poll is how often Run re-reads the files. Zero: DefaultPoll.
	Poll time.Duration
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Pair is a certificate served from files, replaced when they change.
type Pair struct {
	cfg  Config
	log  *slog.Logger
	cert atomic.Pointer[tls.Certificate]
	// certPEM and keyPEM are the bytes the current certificate was built
	// from; only Run touches them after New. Comparing contents rather
	// than modification times catches a copy that keeps the old mtime and
	// a rewrite within the file system's time granularity.
	certPEM, keyPEM []byte
}

// New loads the pair once, so that a missing or bad certificate stops the
// process at start, naming the files. It starts nothing.
func New(cfg Config) (*Pair, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, ErrIncomplete
	}
	if cfg.Poll < 0 {
		return nil, fmt.Errorf("tlsx: poll %v is negative", cfg.Poll)
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Pair{cfg: cfg, log: cfg.Logger}
	if _, err := p.load(); err != nil {
		return nil, err
	}
	return p, nil
}

// load reads both files and, when either changed, replaces the served
// certificate; a pair that does not parse leaves the old one in place.
// It reports whether it replaced it.
func (p *Pair) load() (bool, error) {
	certPEM, err := os.ReadFile(p.cfg.CertFile)
	if err != nil {
		return false, fmt.Errorf("tlsx: certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(p.cfg.KeyFile)
	if err != nil {
		return false, fmt.Errorf("tlsx: key: %w", err)
	}
	if bytes.Equal(certPEM, p.certPEM) && bytes.Equal(keyPEM, p.keyPEM) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// A renewal that writes the certificate and then the key is
		// caught between the two here; the next poll sees both.
		return false, fmt.Errorf("tlsx: certificate %s with key %s: %w", p.cfg.CertFile, p.cfg.KeyFile, err)
	}
	p.cert.Store(&cert)
	p.certPEM, p.keyPEM = certPEM, keyPEM
	if leaf := cert.Leaf; leaf != nil {
		p.log.Info("tlsx: certificate loaded", "file", p.cfg.CertFile, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter)
		if time.Now().After(leaf.NotAfter) {
			// Served anyway: refusing to start would not make clients
			// accept it, and the operator may be mid-renewal.
			p.log.Warn("tlsx: certificate has expired", "file", p.cfg.CertFile, "not_after", leaf.NotAfter)
		}
	}
	return true, nil
}

// Certificate returns the certificate handshakes are served now.
func (p *Pair) Certificate() *tls.Certificate { return p.cert.Load() }

// ServerConfig is the TLS configuration of a server presenting the pair:
// TLS 1.2 at least, Go's default cipher suites, and HTTP/1.1 only —
// WebSocket upgrades are HTTP/1.1 requests, and a client that negotiated
// h2 could not upgrade.
func (p *Pair) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.cert.Load(), nil
		},
	}
}

// Run re-reads the files every Poll until ctx is done. A pair that does
// not load keeps the last good certificate, and is logged once until one
// loads again. It returns nil when ctx is done.
func (p *Pair) Run(ctx context.Context) error {
	return reload.Every(ctx, p.cfg.Poll, p.log, "tlsx: certificate "+p.cfg.CertFile, func(context.Context) error {
		_, err := p.load()
		return err
	})
}
