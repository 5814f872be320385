package stack

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"danmaku/auth"
)

// TestRolesRefuseWithoutKeys: outside `danmaku dev` every role refuses to
// start without its keys, naming each one missing, and no role takes a
// public dev key.
func TestRolesRefuseWithoutKeys(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := func(role string) Config {
		return Config{Roles: []string{role}, Logger: quiet,
			GSLBAddr: "127.0.0.1:0", IngestAddr: "127.0.0.1:0", EdgeAddr: "127.0.0.1:0", OriginAddr: "127.0.0.1:0", SlicerAddr: "127.0.0.1:0",
			PublicCDN: "https://cdn.example/"}
	}
	master := []byte("0123456789abcdef0123456789abcdef")
	tests := []struct {
		name string
		cfg  Config
		want []string // every one must be in the message; none: starts
	}{
		{"gslb, nothing", base(RoleGSLB), []string{"DANMAKU_MASTER_KEY", "DANMAKU_TICKET_KEY", "DANMAKU_OPERATOR_KEYS"}},
		{"ingest, nothing", base(RoleIngest), []string{"DANMAKU_MASTER_KEY", "DANMAKU_GIFT_KEYS"}},
		{"edge, nothing", base(RoleEdge), []string{"DANMAKU_MASTER_KEY"}},
		{"slicer, nothing", base(RoleSlicer), []string{"DANMAKU_OPERATOR_KEYS", "-s3-bucket"}},
		{"origin, nothing", base(RoleOrigin), []string{"-s3-bucket"}},
		{"gslb with its keys", with(base(RoleGSLB), func(c *Config) {
			c.MasterKey, c.TicketKey, c.OperatorKeys = master, []byte("a-real-ticket-key-0123456789abcdef"), []string{"op"}
		}), nil},
		{"ingest with its keys", with(base(RoleIngest), func(c *Config) { c.MasterKey, c.GiftKeys = master, []string{"gift"} }), nil},
		{"edge with its keys", with(base(RoleEdge), func(c *Config) { c.MasterKey = master }), nil},
		{"slicer with its keys", with(base(RoleSlicer), func(c *Config) { c.OperatorKeys, c.DataDir = []string{"op"}, t.TempDir() }), nil},
		{"gslb with the public ticket key", with(base(RoleGSLB), func(c *Config) {
			c.MasterKey, c.TicketKey, c.OperatorKeys = master, auth.DevTicketKey, []string{"op"}
		}), []string{"public dev ticket key"}},
		{"gslb with a 31-byte ticket key", with(base(RoleGSLB), func(c *Config) {
			c.MasterKey, c.TicketKey, c.OperatorKeys = master, []byte("a-short-ticket-key-0123456789ab"), []string{"op"}
		}), []string{"DANMAKU_TICKET_KEY is 31 bytes", "at least 32"}},
		{"gslb with a short previous ticket key", with(base(RoleGSLB), func(c *Config) {
			c.MasterKey, c.TicketKey, c.PreviousTicketKey, c.OperatorKeys = master, []byte("a-real-ticket-key-0123456789abcdef"), []byte("old-key"), []string{"op"}
		}), []string{"DANMAKU_TICKET_KEY_PREVIOUS is 7 bytes"}},
		{"gslb during a rotation", with(base(RoleGSLB), func(c *Config) {
			c.MasterKey, c.TicketKey, c.PreviousTicketKey, c.OperatorKeys = master, []byte("a-real-ticket-key-0123456789abcdef"), []byte("the-old-ticket-key-0123456789abcdef"), []string{"op"}
		}), nil},
		{"ingest with the public service key", with(base(RoleIngest), func(c *Config) { c.MasterKey, c.GiftKeys = master, []string{DevServiceKey} }), []string{DevServiceKey}},
		{"dev fills in its keys", with(base(RoleGSLB), func(c *Config) { c.Dev = true }), nil},
		// `danmaku dev -dev-unsafe-backends`: real backends or production
		// keys, so nothing public.
		{"dev on real backends, nothing", with(base(RoleGSLB), func(c *Config) { c.Dev, c.DevUnsafeBackends = true, true }),
			[]string{"DANMAKU_MASTER_KEY", "DANMAKU_TICKET_KEY", "DANMAKU_OPERATOR_KEYS"}},
		{"dev on real backends with the public ticket key", with(base(RoleGSLB), func(c *Config) {
			c.Dev, c.DevUnsafeBackends = true, true
			c.MasterKey, c.TicketKey, c.OperatorKeys = master, auth.DevTicketKey, []string{"op"}
		}), []string{"public dev ticket key"}},
		{"dev on real backends with the public service key", with(base(RoleIngest), func(c *Config) {
			c.Dev, c.DevUnsafeBackends = true, true
			c.MasterKey, c.GiftKeys = master, []string{DevServiceKey}
		}), []string{DevServiceKey}},
		{"dev on real backends with its keys", with(base(RoleGSLB), func(c *Config) {
			c.Dev, c.DevUnsafeBackends = true, true
			c.MasterKey, c.TicketKey, c.OperatorKeys = master, []byte("a-real-ticket-key-0123456789abcdef"), []string{"op"}
		}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := New(tt.cfg)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				for _, rs := range st.servers {
					rs.ln.Close()
				}
				return
			}
			if err == nil {
				t.Fatal("started without its keys")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not name %s", err, w)
				}
			}
		})
	}
}

func with(c Config, f func(*Config)) Config { f(&c); return c }

// TestDevTicketsOnlyWithThePublicKey: GET /v1/dev/ticket mints with the
// public dev ticket key alone. Dev given a key of its own (an embedder's)
// or on real backends (DevUnsafeBackends) serves no dev ticket: 404
// not_found, never a ticket an unauthenticated caller got signed with a
// real key.
func TestDevTicketsOnlyWithThePublicKey(t *testing.T) {
	master := []byte("0123456789abcdef0123456789abcdef")
	for _, tt := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"public key", Config{Dev: true}, http.StatusOK},
		{"a key of its own", Config{Dev: true, TicketKey: []byte("a-real-ticket-key-0123456789abcdef")}, http.StatusNotFound},
		{"real backends", Config{Dev: true, DevUnsafeBackends: true, MasterKey: master, TicketKey: []byte("a-real-ticket-key-0123456789abcdef"),
			GiftKeys: []string{"g"}, OperatorKeys: []string{"o"}}, http.StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := startStack(t, tt.cfg)
			resp, err := http.Get(st.URLs[RoleGSLB] + "/v1/dev/ticket?user=alice&role=admin")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if tt.want == http.StatusOK {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200", resp.StatusCode)
				}
				return
			}
			var body struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tt.want || body.Error.Code != "not_found" {
				t.Fatalf("status %d %q, want %d not_found", resp.StatusCode, body.Error.Code, tt.want)
			}
		})
	}
}
