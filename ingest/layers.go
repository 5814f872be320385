package ingest

import (
	"context"
	"time"

	"danmaku/internal/audit"
	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/sdk/wire"
)

// defaultDuplicateWindow is how long a text suppresses its copies in a room.
const defaultDuplicateWindow = 10 * time.Second

// antiSpam builds the anti-spam layers and the audit recorder from the
// config (docs/architecture.md, "Anti-spam and the audit trail").
func (s *Server) antiSpam() error {
	cfg := &s.cfg
	if cfg.Bans == nil {
		cfg.Bans = NewMemoryBanStore()
	}
	if cfg.Global == nil {
		cfg.Global = NewMemoryGlobalLimiter(cfg.Clock)
	}
	if cfg.DuplicateWindow == 0 {
		cfg.DuplicateWindow = defaultDuplicateWindow
	}
	var err error
	bl := BanListConfig{Store: cfg.Bans, Clock: cfg.Clock, Registerer: cfg.Registerer, Logger: cfg.Logger}
	if cfg.Events != nil {
		bl.EventOf = cfg.Events.EventOf
	}
	if s.bans, err = NewBanList(bl); err != nil {
		return err
	}
	if s.words, err = NewWordFilter(WordFilterConfig{Source: cfg.Words, Registerer: cfg.Registerer, Logger: cfg.Logger}); err != nil {
		return err
	}
	if s.dups, err = NewDuplicates(DuplicatesConfig{Window: cfg.DuplicateWindow, Clock: cfg.Clock, Registerer: cfg.Registerer}); err != nil {
		return err
	}
	s.mod = newModerationSettings(Moderation{WordPolicy: cfg.WordPolicy, DuplicateWindow: cfg.DuplicateWindow}, cfg.ModerationRules, cfg.Logger,
		func(m Moderation) { s.dups.SetWindow(m.DuplicateWindow) })
	if s.global, err = NewGlobalGate(GlobalGateConfig{Limiter: cfg.Global, Nodes: s.liveIngestNodes, Clock: cfg.Clock, Registerer: cfg.Registerer, Logger: cfg.Logger}); err != nil {
		return err
	}
	s.audit = cfg.Audit
	if s.audit == nil {
		// Always on: without a store of its own the trail is kept in
		// memory (bounded by the recorder), for tests and embedders.
		node := cfg.NodeID
		if node == "" {
			node = "ingest"
		}
		if s.audit, err = audit.New(audit.Config{Store: objstore.NewMemoryStore(), Node: node, Clock: cfg.Clock, Registerer: cfg.Registerer, Logger: cfg.Logger}); err != nil {
			return err
		}
		s.ownAudit = true
	}
	// The first loads, so that a node normally knows the bans and words
	// before its first comment. A failure does not stop the node (a Redis
	// blip at start must not keep an ingest down); it is logged and Run
	// retries every second, and until then nobody is banned and no word
	// is listed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.bans.Refresh(ctx); err != nil {
		s.cfg.Logger.Warn("ingest: ban list not loaded at start; retrying", "err", err)
	}
	if err := s.words.Refresh(ctx); err != nil {
		s.cfg.Logger.Warn("ingest: word list not loaded at start; retrying", "err", err)
	}
	if err := s.mod.Refresh(ctx); err != nil {
		s.cfg.Logger.Warn("ingest: moderation settings not loaded at start; the node's own in force, retrying", "err", err)
	}
	return nil
}

// BanStore returns the store the node's bans come from (the operator API
// writes there).
func (s *Server) BanStore() BanStore { return s.cfg.Bans }

// Words returns the node's word filter, for the rules API to refresh after
// a push and for watchers of the list in force (WordFilter.Loaded).
func (s *Server) Words() *WordFilter { return s.words }

// Moderation returns the node-wide moderation settings in force, for the
// rules API to refresh after a push and for watchers (Loaded).
func (s *Server) Moderation() *ModerationSettings { return s.mod }

// Bans returns the node's ban list, for the operator API to refresh after
// a change.
func (s *Server) Bans() *BanList { return s.bans }

// spamLimits are a room's anti-spam settings: its event's, else the node's.
type spamLimits struct {
	event      string
	eventRate  float64
	wordPolicy WordPolicy
	dupWindow  time.Duration // 0: the node's
}

func (s *Server) spamLimitsOf(v event.RoomView) spamLimits {
	l := spamLimits{wordPolicy: s.mod.Current().WordPolicy}
	if v.Event != nil {
		l.event = v.Event.ID
		l.eventRate = v.EventRefill
	}
	if e := v.Room.Limits; e != nil {
		l.dupWindow = time.Duration(e.DuplicateWindowMs) * time.Millisecond
		if p, err := ParseWordPolicy(e.Words); err == nil && e.Words != "" {
			l.wordPolicy = p
		}
	}
	return l
}

// record puts one comment's decision in the audit trail.
func (s *Server) record(m *wire.Message, room, text string, d audit.Decision, reason, id string) {
	r := audit.Record{At: s.cfg.Clock.Now(), Room: room, User: m.User, Text: text, Decision: d, Reason: reason, ID: id}
	if m.Text != text {
		r.Shown = m.Text
	}
	s.audit.Record(r)
}

// shutdownAudit writes what the recorder still holds.
func (s *Server) shutdownAudit() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.audit.Shutdown(ctx); err != nil {
		s.cfg.Logger.Error("ingest: audit trail: records not written at shutdown", "err", err)
	}
}
