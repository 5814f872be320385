package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"danmaku/internal/redisx"
)

// redisACLPasswordEnv is the environment variable holding role's password
// for `danmaku redis-acl`: DANMAKU_REDIS_PASSWORD_GSLB and so on. The
// environment, never a flag: a flag shows in the process list.
func redisACLPasswordEnv(role string) string {
	return "DANMAKU_REDIS_PASSWORD_" + strings.ToUpper(role)
}

// runRedisACL prints the ACL users of the roles (redisx's table) for a
// Redis the operator runs: ACL SETUSER commands for redis-cli, or the lines
// of an ACL file. Passwords are printed as their SHA-256 only.
func runRedisACL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("redis-acl", stderr)
	format := fs.String("format", "commands", "commands: one ACL SETUSER a line, for redis-cli on standard input; file: the lines of an ACL file (aclfile), the default user off")
	roles := fs.String("roles", strings.Join(redisx.ACLRoles(), ","), "comma list of the roles whose users to print")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: danmaku redis-acl [-format commands|file] [-roles %s]\n\n", strings.Join(redisx.ACLRoles(), ","))
		fmt.Fprintln(stderr, "Prints one Redis ACL user per role (danmaku-ROLE) with only the keys and commands the role")
		fmt.Fprintln(stderr, "uses (docs/operations.md, \"Redis users\"). Each role's password comes from the environment:")
		for _, r := range redisx.ACLRoles() {
			fmt.Fprintf(stderr, "  %s\n", redisACLPasswordEnv(r))
		}
		fmt.Fprintln(stderr, "\nexample: danmaku redis-acl | redis-cli --user admin --askpass")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *format != "commands" && *format != "file" {
		return usageError{fmt.Errorf("-format %q: want commands or file", *format)}
	}
	var picked []string
	for _, r := range strings.Split(*roles, ",") {
		r = strings.TrimSpace(r)
		if !slices.Contains(redisx.ACLRoles(), r) {
			return usageError{fmt.Errorf("-roles: %q is not one of %s", r, strings.Join(redisx.ACLRoles(), ", "))}
		}
		if !slices.Contains(picked, r) {
			picked = append(picked, r)
		}
	}
	var missing []string
	lines := make([]string, 0, len(picked)+1)
	for _, r := range picked {
		setUser, err := redisx.SetUser(r, os.Getenv(redisACLPasswordEnv(r)))
		if errors.Is(err, redisx.ErrNoPassword) {
			missing = append(missing, redisACLPasswordEnv(r))
			continue
		}
		if err != nil {
			return err
		}
		if *format == "file" {
			// An ACL file defines each user from scratch: no reset.
			rules := slices.DeleteFunc(setUser[3:], func(s string) bool { return s == "reset" })
			lines = append(lines, "user "+setUser[2]+" "+strings.Join(rules, " "))
		} else {
			lines = append(lines, strings.Join(setUser, " "))
		}
	}
	if len(missing) > 0 {
		return usageError{fmt.Errorf("no password in %s (the environment, not a flag)", strings.Join(missing, ", "))}
	}
	if *format == "file" {
		// A file that leaves the default user out gets one that may do
		// anything without a password.
		lines = append(lines, "user default off resetkeys resetchannels -@all")
	}
	_, err := fmt.Fprintln(stdout, strings.Join(lines, "\n"))
	return err
}
