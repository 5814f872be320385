package sdk

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestNewConfig(t *testing.T) {
	ok := func() Config { return Config{EntryURL: "https://entry.example.com", Room: "r1", Ticket: "t"} }
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
	}{
		{"no entry URL", func(c *Config) { c.EntryURL = "" }},
		{"entry URL not http", func(c *Config) { c.EntryURL = "ftp://x" }},
		{"bad room", func(c *Config) { c.Room = "a/b" }},
		{"no ticket", func(c *Config) { c.Ticket = "" }},
		{"negative buffer", func(c *Config) { c.MessageBuffer = -1 }},
		{"negative interval", func(c *Config) { c.SendInterval = -time.Second }},
		{"far behind too small", func(c *Config) { c.FarBehind = time.Second }},
		{"backoff below retry", func(c *Config) { c.PollRetry = time.Second; c.PollBackoffMax = 500 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok()
			tc.mutate(&cfg)
			if _, err := New(cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("New = %v, want ErrConfig", err)
			}
		})
	}

	c, err := New(ok())
	if err != nil {
		t.Fatal(err)
	}
	got := c.cfg
	if got.MessageBuffer != defaultMessageBuffer || got.SendQueue != 5 || got.SendInterval != 1200*time.Millisecond ||
		got.SendDedupWindow != 10*time.Second || got.MaxTextRunes != 60 || got.PollRetry != 200*time.Millisecond ||
		got.FarBehind != 10*time.Second || got.RejoinJitter != 3*time.Second || got.FirstJoinJitter != 3*time.Second ||
		got.HTTPClient == nil || got.Logger == nil || got.Clock == nil || c.tick != 0 {
		t.Errorf("defaults not applied: %+v", got)
	}
	if e := c.Entry(); e.Token != "" {
		t.Errorf("Entry before joining = %+v", e)
	}
	// The default client closes an idle connection before any server in
	// front of it does (the gslb's load balancer at 60 s, the nodes at
	// 90 s): a comment POSTed on a connection the server is closing fails.
	if tr, ok := got.HTTPClient.Transport.(*http.Transport); !ok {
		t.Errorf("default client's transport is %T, want an *http.Transport", got.HTTPClient.Transport)
	} else if tr.IdleConnTimeout <= 0 || tr.IdleConnTimeout >= 60*time.Second {
		t.Errorf("default client keeps idle connections %v, want (0, 60 s)", tr.IdleConnTimeout)
	}
}

func TestSeenSet(t *testing.T) {
	s := newSeenSet(3, time.Minute)
	for i, id := range []string{"1-0", "2-0", "3-0"} {
		s.add(id, int64(i))
	}
	s.add("4-0", 3)
	if s.has("1-0") || !s.has("2-0") || !s.has("4-0") || s.len() != 3 {
		t.Errorf("count bound: has(1-0)=%v len=%d", s.has("1-0"), s.len())
	}
	s.add("5-0", 4+time.Minute.Milliseconds()) // 2-0, 3-0 and 4-0 are now older than the window
	if s.has("2-0") || s.has("3-0") || s.has("4-0") || !s.has("5-0") || s.len() != 1 {
		t.Errorf("age bound: len=%d", s.len())
	}
	// The consumed front is reclaimed.
	big := newSeenSet(10, time.Hour)
	for i := range 10_000 {
		big.add(string(rune(i+'a'))+"-0", int64(i))
	}
	if big.len() != 10 || len(big.q)-big.head != 10 || cap(big.q) > 4096 {
		t.Errorf("len=%d queue=%d cap=%d", big.len(), len(big.q)-big.head, cap(big.q))
	}
}
