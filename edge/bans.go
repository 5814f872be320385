package edge

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/ban"
	"danmaku/internal/event"
	"danmaku/internal/reload"
)

// CloseBanned (4451) closes the connections of a user an operator banned
// from the room (or from every room), and refuses their handshake after a
// hello (before one, the answer is 403 banned). Do not reconnect: a new
// entry is refused too (403 banned) until the ban is lifted or lapses.
// 4403 is taken (CloseWrongNode); 451 is HTTP's "unavailable for legal
// reasons", what a ban usually is.
const CloseBanned = 4451

// CodeBanned: the token's user is banned from the room.
const CodeBanned = "banned"

// reasonBanned labels the closes of banned users' connections.
const reasonBanned = "banned"

var refuseBanned = &refusal{http.StatusForbidden, CodeBanned, CloseBanned, "banned from this room"}

// newBans returns the node's view of the bans (nil without a store). The
// edge only reads them: the ingest purges lapsed ones. Refusals are
// counted with the other handshake rejections (code banned), closes with
// the other closes (reason banned).
func newBans(cfg Config, reg prometheus.Registerer) (*ban.List, error) {
	if cfg.Bans == nil {
		return nil, nil
	}
	active := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "danmaku_edge_bans",
		Help: "Bans in this node's snapshot (the edge closes and refuses the users they cover).",
	})
	if err := reg.Register(active); err != nil {
		return nil, fmt.Errorf("edge: bans metrics: %w", err)
	}
	return ban.NewList(ban.ListConfig{
		Store: cfg.Bans, EventOf: eventOf(cfg.Events), What: "edge: ban list", Reload: cfg.BanReload, PurgeEvery: -1,
		Clock: cfg.Clock, Active: active, Logger: cfg.Logger,
	})
}

// eventOf is what an event's bans need of the directory (nil: none).
func eventOf(d *event.Directory) func(string) string {
	if d == nil {
		return nil
	}
	return d.EventOf
}

// banned reports whether user may not hold a connection to room, counting
// the refusal.
func (s *Server) banned(room, user string) bool {
	return s.bans != nil && s.bans.Banned(room, user)
}

// RefreshBans reloads the bans now (an operator API in the same process
// calls it after a write) and, when they changed, closes the connections
// of the users they ban.
func (s *Server) RefreshBans(ctx context.Context) error {
	if s.bans == nil {
		return nil
	}
	changed := s.bans.Changed()
	err := s.bans.Refresh(ctx)
	select {
	case <-changed:
		s.closeBanned()
	default:
	}
	return err
}

// watchBans reloads the bans every BanReload until ctx is done.
func (s *Server) watchBans(ctx context.Context) {
	_ = reload.Every(ctx, s.bans.Every(), s.log, "edge: ban list", s.RefreshBans)
}

// closeBanned closes, with CloseBanned, every connection whose user the
// current bans cover. It runs when the bans change, not per frame: per
// hub it walks the smaller of the hub's distinct users and the bans (map
// reads), and scans the hub's connections only when one of its users is
// banned. A hub's lock is held for the walk, never for a close.
func (s *Server) closeBanned() int {
	n := 0
	for _, h := range s.hubList() {
		for _, c := range h.bannedConns(s.bans) {
			if c.kick(CloseBanned, "banned") {
				n++
			}
		}
	}
	if n > 0 {
		s.log.Info("edge: closed banned users' connections", "conns", n)
	}
	return n
}

// bannedConns returns the hub's connections whose user bans covers.
func (h *hub) bannedConns(bans *ban.List) []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	var users map[string]bool
	mark := func(user string) {
		if users == nil {
			users = map[string]bool{}
		}
		users[user] = true
	}
	if bans.Len() < len(h.users) {
		bans.Each(func(user, scope string) {
			if h.users[user] > 0 && bans.Covers(scope, h.room) {
				mark(user)
			}
		})
	} else {
		for user := range h.users {
			if bans.Has(h.room, user) {
				mark(user)
			}
		}
	}
	if users == nil {
		return nil
	}
	var out []*conn
	for _, c := range h.conns {
		if users[c.user] {
			out = append(out, c)
		}
	}
	return out
}
