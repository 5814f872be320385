package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"danmaku/ingest"
	"danmaku/internal/stack"
	"danmaku/sdk/wire"
)

// moderateCmd is `danmaku moderate`: a moderator's client of a room's
// moderation APIs on an ingest (any node: the stores are shared).
//
//	danmaku moderate takedown ROOM ID [-kind 1] [-reason TEXT]   take a published message down
//	danmaku moderate takedowns ROOM                              the room's takedowns, oldest first
//
// The operator key comes from DANMAKU_OPERATOR_KEY (a secret is never a
// flag); `danmaku dev`'s public key is the default, which every other
// deployment refuses. Flags may follow the arguments.
var moderateSubs = map[string]struct {
	args string
	// flags registers the subcommand's own flags; the returned function
	// runs once they are parsed.
	flags func(ss *settings) func(ctx context.Context, mc moderateClient, args []string) error
}{
	"takedown":  {args: "ROOM ID", flags: takedownFlags},
	"takedowns": {args: "ROOM", flags: func(*settings) func(context.Context, moderateClient, []string) error { return listTakedowns }},
}

// moderateClient calls an ingest's moderation APIs with the operator key.
type moderateClient struct {
	ingest, key string
	stdout      io.Writer
}

func (mc moderateClient) roomURL(room, path string) string {
	return strings.TrimRight(mc.ingest, "/") + "/v1/admin/rooms/" + url.PathEscape(room) + path
}

func runModerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := make([]string, 0, len(moderateSubs)+len(moderateReportSubs))
	for n := range moderateSubs {
		names = append(names, n)
	}
	for n := range moderateReportSubs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{fmt.Errorf("moderate: a subcommand: %s", strings.Join(names, ", "))}
	}
	// The review queue's subcommands (moderate_reports.go) parse their own.
	if run, ok := moderateReportSubs[args[0]]; ok {
		return run(ctx, args[1:], stdout, stderr)
	}
	sub, ok := moderateSubs[args[0]]
	if !ok {
		return usageError{fmt.Errorf("moderate: unknown subcommand %q (%s)", args[0], strings.Join(names, ", "))}
	}
	fs := newFlags("moderate "+args[0], stderr)
	ss := &settings{fs: fs}
	mc := moderateClient{key: env("DANMAKU_OPERATOR_KEY", stack.DevServiceKey), stdout: stdout}
	fs.StringVar(&mc.ingest, "ingest", "http://"+stack.DefaultIngestAddr, "an ingest's base URL")
	run := sub.flags(ss)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if err := ss.err(); err != nil {
		return err
	}
	if want := len(strings.Fields(sub.args)); len(pos) != want {
		return usageError{fmt.Errorf("usage: danmaku moderate %s %s [flags]", args[0], sub.args)}
	}
	if !wire.ValidRoom(pos[0]) {
		return usageError{fmt.Errorf("moderate %s: room %q: 1-64 of A-Z a-z 0-9 _ -", args[0], pos[0])}
	}
	return run(ctx, mc, pos)
}

// parseInterspersed parses fs's flags wherever they stand among args and
// returns the other arguments in order ("--" ends the flags).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// takedownFlags registers `moderate takedown`'s flags.
func takedownFlags(ss *settings) func(ctx context.Context, mc moderateClient, args []string) error {
	kind := int64(wire.KindBarrage)
	var reason string
	countVar(ss, &kind, "kind", "", oneOfCounts(1, 2, 3), "the message's kind: 1 a comment, 2 a gift, 3 a system message (default 1)")
	ss.fs.StringVar(&reason, "reason", "", "why, kept with the takedown and in the audit trail (at most 200 characters)")
	return func(ctx context.Context, mc moderateClient, args []string) error {
		if _, _, err := wire.ParseID(args[1]); err != nil {
			return usageError{fmt.Errorf("moderate takedown: ID %q: a message id, <ms>-<seq>", args[1])}
		}
		body := ingest.TakedownRequest{ID: args[1], Kind: wire.Kind(kind), Reason: reason}
		var out struct {
			Takedown ingest.Takedown `json:"takedown"`
		}
		if err := apiCall(ctx, http.MethodPost, mc.roomURL(args[0], "/takedowns"), mc.key, body, &out); err != nil {
			return err
		}
		t := out.Takedown
		fmt.Fprintf(mc.stdout, "taken down in room %s: %s %s, by %s at %s\n", args[0], t.Kind, t.ID, t.By, time.UnixMilli(t.AtMs).UTC().Format(time.RFC3339))
		return nil
	}
}

// listTakedowns prints a room's takedowns, oldest first.
func listTakedowns(ctx context.Context, mc moderateClient, args []string) error {
	var out struct {
		Takedowns []ingest.Takedown `json:"takedowns"`
	}
	if err := apiCall(ctx, http.MethodGet, mc.roomURL(args[0], "/takedowns"), mc.key, nil, &out); err != nil {
		return err
	}
	if len(out.Takedowns) == 0 {
		return errors.New("moderate takedowns: none in room " + args[0])
	}
	tw := tabwriter.NewWriter(mc.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tID\tBY\tREASON")
	for _, t := range out.Takedowns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", time.UnixMilli(t.AtMs).UTC().Format(time.RFC3339), t.Kind, t.ID, t.By, t.Reason)
	}
	return tw.Flush()
}
