package ratelimit_test

import (
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"danmaku/internal/ratelimit"
)

func TestParse(t *testing.T) {
	const good = `{"rules":[{"name":"entry-ip","route":"GET /v1/entry","key":"ip","algorithm":"local","limit":5,"per":"1s","burst":10,"near":0.5},
		{"name":"ops","route":"/v1/admin/*","key":"credential","credential":"operator","algorithm":"window","limit":20,"per":"1m"}],
		"allow":{"cidrs":["10.0.0.0/8","fd00::1"],"credentials":["operator","sha256:0123456789abcdef"]}}`
	r, err := ratelimit.Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rules) != 2 || r.Rules[1].Credential != "operator" || len(r.Allow.CIDRs) != 2 {
		t.Fatalf("parsed %+v", r)
	}
	rule := func(mod string) string {
		return `{"rules":[{"name":"r","route":"*","key":"ip","algorithm":"local","limit":1,"per":"1s"` + mod + `}]}`
	}
	tests := []struct {
		name, doc, code, says string
	}{
		{"empty", ``, "bad_json", "empty"},
		{"not utf-8", "{\"rules\":[{\"name\":\"\xff\"}]}", "bad_utf8", "UTF-8"},
		{"unknown field", `{"rules":[],"limits":1}`, "bad_json", "limits"},
		{"case variant", `{"Rules":[]}`, "bad_json", "Rules"},
		{"repeated field", rule(`,"limit":2`), "bad_json", "limit"},
		{"trailing value", `{} {}`, "bad_json", ""},
		{"wrong type", rule(`,"burst":"10"`), "bad_json", "burst"},
		{"bad name", strings.Replace(rule(""), `"name":"r"`, `"name":"R!"`, 1), "bad_rules", "rules[0].name"},
		{"duplicate name", `{"rules":[` + rule("")[10:len(rule(""))-2] + `,` + rule("")[10:len(rule(""))-2] + `]}`, "bad_rules", "already"},
		{"bad key", strings.Replace(rule(""), `"key":"ip"`, `"key":"device"`, 1), "bad_rules", "rules[0].key"},
		{"bad algorithm", strings.Replace(rule(""), `"local"`, `"leaky"`, 1), "bad_rules", "rules[0].algorithm"},
		{"bad route", strings.Replace(rule(""), `"*"`, `"v1/entry"`, 1), "bad_rules", "rules[0].route"},
		{"bad method", strings.Replace(rule(""), `"*"`, `"get /v1/entry"`, 1), "bad_rules", "rules[0].route"},
		{"star inside", strings.Replace(rule(""), `"*"`, `"/v1/*/x"`, 1), "bad_rules", "rules[0].route"},
		{"zero limit", strings.Replace(rule(""), `"limit":1`, `"limit":0`, 1), "bad_rules", "rules[0].limit"},
		{"fraction limit", strings.Replace(rule(""), `"limit":1`, `"limit":1.5`, 1), "bad_json", "limit"},
		{"per too short", strings.Replace(rule(""), `"1s"`, `"1ms"`, 1), "bad_rules", "rules[0].per"},
		{"per not a duration", strings.Replace(rule(""), `"1s"`, `"second"`, 1), "bad_rules", "rules[0].per"},
		{"burst on a window", strings.Replace(rule(`,"burst":3`), `"local"`, `"window"`, 1), "bad_rules", "rules[0].burst"},
		{"window too large", strings.Replace(strings.Replace(rule(""), `"local"`, `"window"`, 1), `"limit":1`, `"limit":20000`, 1), "bad_rules", "rules[0].limit"},
		{"near above 1", rule(`,"near":1.5`), "bad_rules", "rules[0].near"},
		{"credential on ip rule", rule(`,"credential":"gift"`), "bad_rules", "rules[0].credential"},
		{"bad cidr", `{"allow":{"cidrs":["10.0.0.0/33"]}}`, "bad_rules", "allow.cidrs[0]"},
		{"secret in allowlist", `{"allow":{"credentials":["s3cr3t key"]}}`, "bad_rules", "allow.credentials[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ratelimit.Parse([]byte(tt.doc))
			var ce *ratelimit.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ratelimit.ErrBadRules) {
				t.Fatalf("Parse = %v, want a ConfigError", err)
			}
			if ce.Code != tt.code || !strings.Contains(ce.Message, tt.says) {
				t.Fatalf("Parse = %s: %s; want code %s naming %q", ce.Code, ce.Message, tt.code, tt.says)
			}
		})
	}
}

// The built-in rules must parse on every machine, or a deployment
// without its own would not start; the per-node rule grows with the cores
// (the figures docs/api-limits.md gives), the per-client ones do not; only
// dev allowlists anything.
func TestDefaultRules(t *testing.T) {
	for _, tt := range []struct {
		name        string
		m           ratelimit.Machine
		node, burst int64
		allowed     []string
	}{
		{"2 cores", ratelimit.Machine{Cores: 2}, 20_000, 40_000, nil},
		{"16 cores", ratelimit.Machine{Cores: 16}, 160_000, 320_000, nil},
		{"1 core", ratelimit.Machine{Cores: 1}, 10_000, 20_000, nil},
		{"this machine", ratelimit.Machine{}, 10_000 * int64(runtime.NumCPU()), 20_000 * int64(runtime.NumCPU()), nil},
		{"dev", ratelimit.Machine{Cores: 2, Dev: true}, 20_000, 40_000, []string{"127.0.0.0/8", "::1/128"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ratelimit.DefaultRules(tt.m)
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ratelimit.Parse(b); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Allow.CIDRs, tt.allowed) || len(r.Allow.Credentials) != 0 {
				t.Fatalf("allow %+v, want cidrs %v and no credential", r.Allow, tt.allowed)
			}
			for _, ru := range r.Rules {
				switch {
				case ru.Name == "entry-node":
					if ru.Limit != tt.node || ru.Burst != tt.burst {
						t.Fatalf("entry-node %d/s burst %d, want %d burst %d", ru.Limit, ru.Burst, tt.node, tt.burst)
					}
				case ru.Key == ratelimit.KeyGlobal:
					t.Fatalf("per-node rule %s: not scaled here", ru.Name)
				}
			}
			// A per-client rule counts a client, not the machine.
			if ws := ruleNamed(t, r, "ws-ip"); ws.Limit != 1000 || ws.Burst != 5000 {
				t.Fatalf("ws-ip %+v", ws)
			}
		})
	}
}

func ruleNamed(t *testing.T, r ratelimit.Rules, name string) ratelimit.Rule {
	t.Helper()
	for _, ru := range r.Rules {
		if ru.Name == name {
			return ru
		}
	}
	t.Fatalf("no rule %s", name)
	return ratelimit.Rule{}
}

func TestFingerprint(t *testing.T) {
	fp := ratelimit.Fingerprint("gift-key-1")
	if !strings.HasPrefix(fp, "sha256:") || len(fp) != len("sha256:")+16 || strings.Contains(fp, "gift-key") {
		t.Fatalf("Fingerprint = %q", fp)
	}
	if _, err := ratelimit.Parse([]byte(`{"allow":{"credentials":["` + fp + `"]}}`)); err != nil {
		t.Fatalf("a fingerprint is refused in the allowlist: %v", err)
	}
}
