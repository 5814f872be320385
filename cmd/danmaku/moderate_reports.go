package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"danmaku/ingest"
	"danmaku/internal/stack"
	"danmaku/sdk/wire"
)

// moderateReportSubs are the review queue's subcommands of `danmaku
// moderate`, for its dispatcher to run with the arguments after the
// subcommand's name:
//
//	danmaku moderate reports ROOM [-n 20]                             the most reported messages, with their context
//	danmaku moderate review ROOM ID takedown|ban|dismiss [-kind 1] [-reason TEXT] [-scope room|event|all] [-ttl 10m]
//
// The operator key comes from DANMAKU_OPERATOR_KEY (a secret is never a
// flag; a host's or admin's dynamic token of the room is taken as well);
// `danmaku dev`'s public key is the default. Flags may follow the
// arguments.
var moderateReportSubs = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"reports": runModerateReports,
	"review":  runModerateReview,
}

// interspersed parses args whose flags may come before, between or after
// the positional arguments, and returns the positional ones.
func interspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func moderateFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := newFlags("moderate "+name, stderr)
	ingestURL := fs.String("ingest", "http://"+stack.DefaultIngestAddr, "an ingest's base URL (any node: the reports are shared)")
	return fs, ingestURL
}

func reportsURL(ingestURL, room, path string) string {
	return strings.TrimRight(ingestURL, "/") + "/v1/admin/rooms/" + url.PathEscape(room) + "/reports" + path
}

func runModerateReports(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, ingestURL := moderateFlags("reports", stderr)
	n := fs.Int("n", 20, "how many messages, the most reported first (1-200)")
	pos, err := interspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{errors.New("usage: danmaku moderate reports ROOM [-n 20]")}
	}
	if !wire.ValidRoom(pos[0]) {
		return usageError{fmt.Errorf("moderate reports: room %q: 1-64 of A-Z a-z 0-9 _ -", pos[0])}
	}
	if *n < 1 || *n > 200 {
		return usageError{fmt.Errorf("moderate reports: -n %d: 1-200", *n)}
	}
	var out struct {
		Reports []ingest.ReviewItem `json:"reports"`
	}
	u := reportsURL(*ingestURL, pos[0], fmt.Sprintf("?n=%d", *n))
	if err := apiCall(ctx, http.MethodGet, u, env("DANMAKU_OPERATOR_KEY", stack.DevServiceKey), nil, &out); err != nil {
		return err
	}
	printReports(stdout, out.Reports)
	return nil
}

// printReports writes the queue as a table, each message's context
// (bans in force, earlier decisions) on the lines below it.
func printReports(w io.Writer, items []ingest.ReviewItem) {
	if len(items) == 0 {
		fmt.Fprintln(w, "no reports")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tID\tK\tUSER\tTEXT\tREASONS\tLAST\tDECISION")
	for _, it := range items {
		user, text := it.User, fmt.Sprintf("%q", it.Text)
		if !it.Known {
			user, text = "?", "(not held by the stream: see danmaku audit)"
		}
		var reasons []string
		for _, r := range []string{ingest.ReportSpam, ingest.ReportAbuse, ingest.ReportIllegal, ingest.ReportOther} {
			if c := it.Reasons[r]; c > 0 {
				reasons = append(reasons, fmt.Sprintf("%s:%d", r, c))
			}
		}
		decision := "-"
		if d := it.Decision; d != nil {
			decision = d.Action + " by " + orOperator(d.By)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", it.Count, it.ID, it.Kind, user, text, strings.Join(reasons, ","),
			it.Last.UTC().Format(time.TimeOnly), decision)
		for _, b := range it.Bans {
			scope := "every room"
			switch {
			case b.Room != "":
				scope = "room " + b.Room
			case b.Event != "":
				scope = "event " + b.Event
			}
			until := "no end"
			if !b.Until.IsZero() {
				until = "until " + b.Until.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "\t\t\t\t  banned: %s, %s %s\t\t\t\n", scope, until, b.Reason)
		}
		for _, d := range it.History {
			fmt.Fprintf(tw, "\t\t\t\t  earlier: %s of %s by %s at %s %s\t\t\t\n", d.Action, d.ID, orOperator(d.By), d.At.UTC().Format(time.TimeOnly), d.Reason)
		}
	}
	_ = tw.Flush()
}

func orOperator(by string) string {
	if by == "" {
		return "an operator"
	}
	return by
}

func runModerateReview(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, ingestURL := moderateFlags("review", stderr)
	kind := fs.Int("kind", int(wire.KindBarrage), "the message's kind: 1 barrage, 2 gift, 3 system")
	reason := fs.String("reason", "", "the moderator's note (a ban's reason too)")
	scope := fs.String("scope", "room", "a ban's scope: room, event (the room's event) or all (event and all need an operator key)")
	ttl := fs.Duration("ttl", 0, "a ban's length (0: no end)")
	pos, err := interspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 {
		return usageError{errors.New("usage: danmaku moderate review ROOM ID takedown|ban|dismiss [flags]")}
	}
	room, id, action := pos[0], pos[1], pos[2]
	switch {
	case !wire.ValidRoom(room):
		return usageError{fmt.Errorf("moderate review: room %q: 1-64 of A-Z a-z 0-9 _ -", room)}
	case action != ingest.ActionTakedown && action != ingest.ActionBan && action != ingest.ActionDismiss:
		return usageError{fmt.Errorf("moderate review: action %q: takedown, ban or dismiss", action)}
	case *kind < 1 || *kind > 3:
		return usageError{fmt.Errorf("moderate review: -kind %d: 1, 2 or 3", *kind)}
	case *ttl < 0 || (*ttl > 0 && *ttl < time.Second):
		return usageError{fmt.Errorf("moderate review: -ttl %v: whole seconds, at least 1 s", *ttl)}
	}
	body := ingest.ReviewRequest{Kind: wire.Kind(*kind), Reason: *reason}
	if action == ingest.ActionBan {
		body.Scope, body.TTLSeconds = *scope, int64(*ttl/time.Second)
	}
	var out struct {
		Report ingest.ReviewItem `json:"report"`
	}
	u := reportsURL(*ingestURL, room, "/"+url.PathEscape(id)+"/"+action)
	if err := apiCall(ctx, http.MethodPost, u, env("DANMAKU_OPERATOR_KEY", stack.DevServiceKey), body, &out); err != nil {
		return err
	}
	printReports(stdout, []ingest.ReviewItem{out.Report})
	return nil
}
