package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"danmaku/internal/redisx"
)

// TestRedisACLCommand: every bad input is a usage error naming what is
// wrong; the output holds one user a line, never a password in the clear.
func TestRedisACLCommand(t *testing.T) {
	for _, r := range redisx.ACLRoles() {
		t.Setenv(redisACLPasswordEnv(r), "secret-"+r)
	}
	for _, c := range []struct {
		name    string
		args    []string
		unset   string // a password variable to empty
		wantErr string // in a usage error; "" for success
		want    []string
	}{
		{name: "commands", want: []string{"ACL SETUSER danmaku-gslb reset on #", "ACL SETUSER danmaku-ops reset on #"}},
		{name: "file", args: []string{"-format", "file"}, want: []string{"user danmaku-edge on #", "user default off resetkeys resetchannels -@all"}},
		{name: "some roles", args: []string{"-roles", "edge,edge"}, unset: redisACLPasswordEnv("gslb"), want: []string{"ACL SETUSER danmaku-edge reset on #"}},
		{name: "bad format", args: []string{"-format", "yaml"}, wantErr: `-format "yaml"`},
		{name: "bad role", args: []string{"-roles", "edge,origin"}, wantErr: `"origin" is not one of`},
		{name: "argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
		{name: "no password", unset: redisACLPasswordEnv("slicer"), wantErr: "no password in DANMAKU_REDIS_PASSWORD_SLICER"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.unset != "" {
				t.Setenv(c.unset, "")
			}
			var out, errOut bytes.Buffer
			err := runRedisACL(context.Background(), c.args, &out, &errOut)
			if c.wantErr != "" {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want a usage error with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			for _, w := range c.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("no line starting %q in\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "secret-") {
				t.Errorf("a password in the clear:\n%s", out.String())
			}
			if c.name == "some roles" && len(lines) != 1 {
				t.Errorf("%d lines for one role", len(lines))
			}
		})
	}
}
