package redisx

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

var updateTerraform = flag.Bool("update", false, "rewrite infra/terraform/redis_acl.tf's access strings from the table")

// terraformACL is the file whose ElastiCache users carry the table.
const terraformACL = "../../infra/terraform/redis_acl.tf"

// terraformBlock returns the locals block redis_acl.tf holds between its
// BEGIN and END lines: every role's access string, formatted as terraform
// fmt leaves it (names aligned, one role a line, sorted).
func terraformBlock(t *testing.T) string {
	t.Helper()
	roles := slices.Sorted(slices.Values(ACLRoles()))
	width := 0
	for _, r := range roles {
		width = max(width, len(r))
	}
	var b strings.Builder
	b.WriteString("  redis_acl_access = {\n")
	for _, r := range roles {
		s, err := AccessString(r)
		if err != nil {
			t.Fatal(err)
		}
		// Written as a plain HCL string: nothing in it may need escaping.
		if strings.ContainsAny(s, "\"\\\n") || strings.Contains(s, "${") || strings.Contains(s, "%{") {
			t.Fatalf("%s's access string %q needs HCL escapes", r, s)
		}
		fmt.Fprintf(&b, "    %-*s = \"%s\"\n", width, r, s)
	}
	b.WriteString("  }\n")
	return b.String()
}

// TestTerraformACL holds infra/terraform/redis_acl.tf's ElastiCache access
// strings equal to the table, so that the users Terraform creates are the
// users the stack's ACL test proves. With -update it rewrites them.
func TestTerraformACL(t *testing.T) {
	src, err := os.ReadFile(terraformACL)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "  # BEGIN redis_acl", "  # END redis_acl"
	text := string(src)
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q lines", terraformACL, strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	i += strings.Index(text[i:], "\n") + 1 // the block starts after the BEGIN line
	want := terraformBlock(t)
	if text[i:j] == want {
		return
	}
	if *updateTerraform {
		if err := os.WriteFile(terraformACL, []byte(text[:i]+want+text[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: access strings rewritten", terraformACL)
		return
	}
	t.Fatalf("%s's access strings differ from internal/redisx/acl.go (go test ./internal/redisx -run TestTerraformACL -update rewrites them); want:\n%s", terraformACL, want)
}

// TestACLRules checks the shape every role's rules must keep: keys of the
// project only, no command category granted, the commands every client
// needs, no administrative command.
func TestACLRules(t *testing.T) {
	for _, role := range ACLRoles() {
		t.Run(role, func(t *testing.T) {
			rules, err := ACL(role)
			if err != nil {
				t.Fatal(err)
			}
			all := slices.Index(rules, "-@all")
			if all < 0 {
				t.Fatalf("no -@all in %v", rules)
			}
			for _, k := range rules[:all] {
				pattern := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(k, "%R~"), "%W~"), "~")
				if pattern == k || !strings.HasPrefix(pattern, Prefix) {
					t.Errorf("key rule %q: want ~, %%R~ or %%W~ and a pattern under %q", k, Prefix)
				}
			}
			for _, c := range rules[all+1:] {
				switch {
				case !strings.HasPrefix(c, "+"), strings.HasPrefix(c, "+@"):
					t.Errorf("command rule %q: want +command", c)
				case slices.Contains([]string{"+flushall", "+flushdb", "+keys", "+scan", "+config", "+acl", "+script", "+client", "+debug", "+shutdown", "+function", "+monitor"}, c):
					t.Errorf("%s may run %s", role, c)
				}
			}
			for _, need := range []string{"+ping", "+cluster|slots", "+command"} {
				if !slices.Contains(rules, need) {
					t.Errorf("no %s: a Cluster client cannot connect without it", need)
				}
			}
			if len(rules) != len(slices.Compact(slices.Clone(rules))) {
				t.Errorf("a rule repeats: %v", rules)
			}
		})
	}
}

func TestSetUser(t *testing.T) {
	for _, c := range []struct {
		name, role, password string
		want                 error
	}{
		{"no password", ACLEdge, "", ErrNoPassword},
		{"unknown role", "origin", "pw", ErrUnknownRole},
		{"edge", ACLEdge, "pw", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			args, err := SetUser(c.role, c.password)
			if !errors.Is(err, c.want) {
				t.Fatalf("SetUser(%q, %q): %v, want %v", c.role, c.password, err, c.want)
			}
			if c.want != nil {
				return
			}
			rules, _ := ACL(c.role)
			// sha256("pw"): the password never appears in the clear.
			head := []string{"ACL", "SETUSER", "danmaku-edge", "reset", "on", "#30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"}
			if !slices.Equal(args, append(head, rules...)) {
				t.Fatalf("SetUser: %v", args)
			}
			if s, _ := AccessString(c.role); s != "on "+strings.Join(rules, " ") {
				t.Fatalf("AccessString: %q", s)
			}
		})
	}
}
