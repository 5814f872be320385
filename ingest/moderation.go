package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"danmaku/internal/httpx"
	"danmaku/internal/reload"
	"danmaku/internal/rules"
	"danmaku/internal/strictjson"
)

// ModerationDoc is the moderation document (rules.KindModeration): the
// node-wide moderation settings, for rooms whose event does not set its
// own (an event's limits win). Both fields are required, so that the
// document alone says what every node does, whatever flags a node started
// with; the flags (-word-policy) are only the settings before the first
// push.
//
//	{"word_policy": "mask", "duplicate_window_ms": 10000}
type ModerationDoc struct {
	// WordPolicy is what a listed word does: mask, reject, refuse or off.
	WordPolicy *string `json:"word_policy"`
	// DuplicateWindowMs is how long a text suppresses its copies in a
	// room: MinDuplicateWindow to MaxDuplicateWindow, in milliseconds.
	DuplicateWindowMs *int64 `json:"duplicate_window_ms"`
}

// Bounds and code of a moderation document.
const (
	MinDuplicateWindow = 100 * time.Millisecond
	MaxDuplicateWindow = 10 * time.Minute
	// maxModerationDoc bounds a moderation document's body.
	maxModerationDoc = 4 << 10
	// CodeBadModeration is the code of a document ParseModeration refuses
	// for a value (the strict decoder's bad_json / bad_utf8 for its form).
	CodeBadModeration = "bad_moderation"
)

// Moderation is one version of the node-wide moderation settings.
type Moderation struct {
	WordPolicy      WordPolicy
	DuplicateWindow time.Duration
}

// ParseModeration decodes and checks a moderation document strictly
// (strictjson: unknown, repeated and case-variant fields refused), whole:
// a *rules.BadDocument naming the field, or the settings.
func ParseModeration(b []byte) (Moderation, error) {
	if len(b) > maxModerationDoc {
		return Moderation{}, &rules.BadDocument{Code: httpx.CodeTooLarge, Message: fmt.Sprintf("a moderation document holds at most %d bytes (got %d)", maxModerationDoc, len(b))}
	}
	var d ModerationDoc
	if err := strictjson.Decode(b, &d); err != nil {
		if e, ok := errors.AsType[*strictjson.Error](err); ok {
			return Moderation{}, &rules.BadDocument{Code: e.Code, Message: e.Message}
		}
		return Moderation{}, fmt.Errorf("ingest: moderation: %w", err) // not a pointer: our bug
	}
	bad := func(format string, args ...any) (Moderation, error) {
		return Moderation{}, &rules.BadDocument{Code: CodeBadModeration, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case d.WordPolicy == nil:
		return bad(`field "word_policy": required (mask, reject, refuse or off)`)
	case d.DuplicateWindowMs == nil:
		return bad(`field "duplicate_window_ms": required`)
	}
	p, err := ParseWordPolicy(*d.WordPolicy)
	if err != nil || *d.WordPolicy == "" {
		return bad(`field "word_policy": %q is none of mask, reject, refuse, off`, *d.WordPolicy)
	}
	w := time.Duration(*d.DuplicateWindowMs) * time.Millisecond
	if *d.DuplicateWindowMs < MinDuplicateWindow.Milliseconds() || *d.DuplicateWindowMs > MaxDuplicateWindow.Milliseconds() {
		return bad(`field "duplicate_window_ms": %d is outside %d-%d`, *d.DuplicateWindowMs, MinDuplicateWindow.Milliseconds(), MaxDuplicateWindow.Milliseconds())
	}
	return Moderation{WordPolicy: p, DuplicateWindow: w}, nil
}

// CheckModeration is ParseModeration as a rules.Check.
func CheckModeration(b []byte) error {
	_, err := ParseModeration(b)
	return err
}

// moderationSet is the settings in force and the version they came from.
type moderationSet struct {
	Moderation
	version int64         // 0: the node's own (flags), nothing pushed
	changed chan struct{} // closed when another version replaces this one
}

// ModerationSettings are the node-wide moderation settings in force: the
// node's own (its Config, from flags) until a version is pushed to the
// rules store, then the store's head, reloaded every 250 ms as the word
// list is. A version ParseModeration refuses (written by other means) is
// an error and the settings in force stay. Safe for concurrent use.
type ModerationSettings struct {
	store rules.Store // nil: the node's own, always
	f     *rules.Follower
	every time.Duration
	log   *slog.Logger
	apply func(Moderation) // told of every new version

	mu  sync.Mutex // one Refresh at a time
	cur atomic.Pointer[moderationSet]
}

func newModerationSettings(own Moderation, store rules.Store, log *slog.Logger, apply func(Moderation)) *ModerationSettings {
	m := &ModerationSettings{store: store, every: defaultWordReload, log: log, apply: apply}
	if store != nil {
		m.f = rules.NewFollower(store, rules.KindModeration)
	}
	m.cur.Store(&moderationSet{Moderation: own, changed: make(chan struct{})})
	return m
}

// Current returns the settings in force.
func (m *ModerationSettings) Current() Moderation { return m.cur.Load().Moderation }

// Loaded returns the version in force (0: the node's own settings, nothing
// pushed) and a channel closed when another version replaces it.
func (m *ModerationSettings) Loaded() (version int64, changed <-chan struct{}) {
	s := m.cur.Load()
	return s.version, s.changed
}

// Refresh puts the store's head in force if it moved.
func (m *ModerationSettings) Refresh(ctx context.Context) error {
	if m.f == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, body, err := m.f.Load(ctx)
	if err != nil {
		return fmt.Errorf("ingest: moderation: %w", err)
	}
	if v == 0 || v == m.cur.Load().version {
		return nil
	}
	mod, err := ParseModeration(body)
	if err != nil {
		return fmt.Errorf("ingest: moderation version %d: %w", v, err)
	}
	m.apply(mod)
	old := m.cur.Swap(&moderationSet{Moderation: mod, version: v, changed: make(chan struct{})})
	close(old.changed)
	m.log.Info("ingest: moderation settings loaded", "version", strconv.FormatInt(v, 10),
		"word_policy", mod.WordPolicy.String(), "duplicate_window", mod.DuplicateWindow)
	return nil
}

// Run reloads every interval until ctx is done.
func (m *ModerationSettings) Run(ctx context.Context) error {
	if m.f == nil {
		return nil
	}
	return reload.Every(ctx, m.every, m.log, "ingest: moderation settings", m.Refresh)
}
