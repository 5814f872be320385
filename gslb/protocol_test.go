package gslb_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/sdk/wire"
)

// The entry request carries the client's protocol: below the gslb's
// minimum it is refused with 426 naming the minimum, malformed it is a 400,
// and the answer's sync follows SyncMinProtocol (a client that sends none is
// protocol 1, from before playheads, and stays in wall-clock mode).
func TestEntryProtocol(t *testing.T) {
	ticket := mintTicket(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	cases := []struct {
		name      string
		cfg       gslb.ServerConfig
		query     string
		status    int
		code      string
		wantSync  bool
		inMessage string
	}{
		{"none: protocol 1, no sync", gslb.ServerConfig{}, "", 200, "", false, ""},
		{"this SDK's: sync", gslb.ServerConfig{}, "&proto=2", 200, "", true, ""},
		{"a newer one than the gslb knows: served, sync", gslb.ServerConfig{}, "&proto=7", 200, "", true, ""},
		{"sync steered off for protocol 2", gslb.ServerConfig{SyncMinProtocol: 3}, "&proto=2", 200, "", false, ""},
		{"below the minimum", gslb.ServerConfig{MinProtocol: 2}, "&proto=1", 426, "protocol_unsupported", false, "the minimum is 2"},
		{"none, below the minimum", gslb.ServerConfig{MinProtocol: 2}, "", 426, "protocol_unsupported", false, "the minimum is 2"},
		{"zero", gslb.ServerConfig{}, "&proto=0", 400, "bad_protocol", false, ""},
		{"leading zero", gslb.ServerConfig{}, "&proto=02", 400, "bad_protocol", false, ""},
		{"sign", gslb.ServerConfig{}, "&proto=%2B2", 400, "bad_protocol", false, ""},
		{"too large", gslb.ServerConfig{}, "&proto=1000", 400, "bad_protocol", false, ""},
		{"not a number", gslb.ServerConfig{}, "&proto=two", 400, "bad_protocol", false, ""},
		{"empty", gslb.ServerConfig{}, "&proto=", 400, "bad_protocol", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newEntryFixtureWith(t, true, gslb.AllocatorConfig{}, c.cfg, healthyNodes()...)
			rec := f.get("/v1/entry?room=r1"+c.query, ticket)
			if rec.Code != c.status {
				t.Fatalf("status %d %s, want %d", rec.Code, rec.Body, c.status)
			}
			if c.status != http.StatusOK {
				if code := errorCode(t, rec); code != c.code {
					t.Errorf("code %q, want %q", code, c.code)
				}
				if !strings.Contains(rec.Body.String(), c.inMessage) {
					t.Errorf("message %s does not say %q", rec.Body, c.inMessage)
				}
				return
			}
			var e wire.Entry
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			if e.Sync != c.wantSync {
				t.Errorf("sync %v, want %v", e.Sync, c.wantSync)
			}
		})
	}
}

// A minimum above the protocol this build speaks would refuse every client
// there is: the server refuses to start.
func TestServerConfigProtocol(t *testing.T) {
	for _, cfg := range []gslb.ServerConfig{{MinProtocol: wire.Protocol + 1}, {MinProtocol: -1}, {SyncMinProtocol: -1}} {
		cfg.Allocator, cfg.CDN = newFixture(t, gslb.AllocatorConfig{}).alloc, "https://cdn.example"
		ring, _ := auth.NewKeyring(auth.KeyringConfig{Store: auth.NewMemorySecrets(), MasterKey: master})
		tickets, _ := auth.NewTicketVerifier(ticketKey, time.Now)
		cfg.Keyring, cfg.Tickets = ring, tickets
		if _, err := gslb.NewServer(cfg); err == nil {
			t.Errorf("NewServer(MinProtocol %d, SyncMinProtocol %d) started", cfg.MinProtocol, cfg.SyncMinProtocol)
		}
	}
}
