package slicer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"danmaku/internal/httpx"
)

// Settings are the slicer settings operators change at run time. They live
// in a SettingsStore shared by every slicer, so a change reaches all of them
// and survives a failover.
type Settings struct {
	// Budget is the messages per room per second.
	Budget int `json:"budget"`
	// Shares is each queue's share of it, in queue order: system, high-value
	// gifts, low-value gifts, barrage. They sum to 1.
	Shares Shares `json:"shares"`
}

// SettingsStore keeps the shared Settings.
type SettingsStore interface {
	// Load returns the settings, or nil when none were saved (the
	// configured ones apply).
	Load(ctx context.Context) (*Settings, error)
	Save(ctx context.Context, s Settings) error
}

var (
	_ SettingsStore = (*MemorySettings)(nil)
	_ SettingsStore = (*RedisSettings)(nil)
)

// MemorySettings is the in-process SettingsStore.
type MemorySettings struct {
	mu sync.Mutex
	s  *Settings
}

// Load implements SettingsStore.
func (m *MemorySettings) Load(ctx context.Context) (*Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.s == nil {
		return nil, nil
	}
	cp := *m.s
	return &cp, nil
}

// Save implements SettingsStore.
func (m *MemorySettings) Save(ctx context.Context, s Settings) error {
	m.mu.Lock()
	m.s = &s
	m.mu.Unlock()
	return nil
}

// RedisSettings keeps the settings as JSON in one key, danmaku:slicer:settings.
type RedisSettings struct{ rdb redis.UniversalClient }

// NewRedisSettings returns a SettingsStore on rdb.
func NewRedisSettings(rdb redis.UniversalClient) *RedisSettings { return &RedisSettings{rdb: rdb} }

const settingsKey = "danmaku:slicer:settings"

// Load implements SettingsStore.
func (r *RedisSettings) Load(ctx context.Context) (*Settings, error) {
	b, err := r.rdb.Get(ctx, settingsKey).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("slicer: load settings: %w", err)
	}
	var s Settings
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("slicer: settings in Redis are not valid: %w", err)
	}
	return &s, nil
}

// Save implements SettingsStore.
func (r *RedisSettings) Save(ctx context.Context, s Settings) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := r.rdb.Set(ctx, settingsKey, b, 0).Err(); err != nil {
		return fmt.Errorf("slicer: save settings: %w", err)
	}
	return nil
}

// Current returns the budget and shares in force in this slicer.
func (s *Slicer) Current() Settings {
	b := s.budget.Load()
	return Settings{Budget: b.budget, Shares: b.shares}
}

// syncSettings applies the shared settings, if any were saved.
func (s *Slicer) syncSettings(ctx context.Context) {
	if s.cfg.Settings == nil {
		return
	}
	st, err := s.cfg.Settings.Load(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("slicer: settings not loaded; keeping the current ones", "err", err)
		}
		return
	}
	if st == nil || *st == s.Current() {
		return
	}
	if err := s.SetBudget(st.Budget, st.Shares); err != nil {
		s.cfg.Logger.Warn("slicer: shared settings refused", "err", err)
		return
	}
	s.cfg.Logger.Info("slicer: settings changed", "budget", st.Budget, "shares", st.Shares)
}

// settingsRequest is the body of PUT /v1/admin/budget. Its shares are a
// slice, not Shares: encoding/json fills an array from a shorter JSON
// array with zeros and drops what is past its end, so [1] became
// [1,0,0,0] and a fifth share vanished, both answered 200.
type settingsRequest struct {
	Budget int       `json:"budget"`
	Shares []float64 `json:"shares"`
}

// settings returns the request's Settings, or an error naming the shares
// when there are not exactly numQueues of them.
func (r *settingsRequest) settings() (Settings, error) {
	s := Settings{Budget: r.Budget}
	if len(r.Shares) != int(numQueues) {
		return s, fmt.Errorf("slicer: shares: exactly %d (system, high-value gifts, low-value gifts, barrage), no more, no fewer (got %d)", numQueues, len(r.Shares))
	}
	copy(s.Shares[:], r.Shares)
	return s, nil
}

// RegisterAdmin adds GET and PUT /v1/admin/budget to r, for holders of one
// of keys (Authorization: Bearer; no keys: nobody). PUT validates, saves to
// the shared settings store (every slicer applies it within Discover) and
// applies it here at once.
func (s *Slicer) RegisterAdmin(r gin.IRoutes, keys []string) {
	authorized := func(c *gin.Context) {
		if !httpx.KeyMatches(c, keys) {
			httpx.Abort(c, httpx.Errorf(http.StatusUnauthorized, "bad_admin_key", "the admin API needs an operator key"))
		}
	}
	r.GET("/v1/admin/budget", authorized, func(c *gin.Context) { c.JSON(http.StatusOK, s.Current()) })
	r.PUT("/v1/admin/budget", authorized, func(c *gin.Context) {
		var req settingsRequest
		if e := httpx.BindJSON(c, 1<<10, &req); e != nil {
			httpx.Abort(c, e)
			return
		}
		in, err := req.settings()
		if err == nil {
			err = checkBudget(in.Budget, in.Shares)
		}
		if err != nil {
			httpx.Abort(c, httpx.Errorf(http.StatusBadRequest, "bad_settings", "%v", err))
			return
		}
		// Saved first: applied only here, it would be reverted by the next
		// sync with the shared store anyway.
		if err := s.cfg.Settings.Save(c.Request.Context(), in); err != nil {
			// The error is logged, not answered: its text (a Redis
			// address, a driver's internals) is nothing a client can
			// act on.
			s.cfg.Logger.ErrorContext(c.Request.Context(), "slicer: settings not saved", "op", "save settings", "route", c.FullPath(), "err", err)
			e := httpx.Errorf(http.StatusServiceUnavailable, "backend_unavailable", "settings not saved, nothing changed")
			e.RetryAfter = time.Second
			httpx.Abort(c, e)
			return
		}
		_ = s.SetBudget(in.Budget, in.Shares)
		c.JSON(http.StatusOK, s.Current())
	})
}
