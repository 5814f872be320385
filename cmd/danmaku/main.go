// Command danmaku is the one binary of the system: a subcommand per role,
// `dev` (every role in one process, no external service), and client tools.
// It parses flags and wires; the logic lives in the component packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"dev":      {"run every role in one process on in-memory backends", runDev},
	"gslb":     {"run the address allocator (entry endpoint)", roleCmd("gslb")},
	"ingest":   {"run an upload node", roleCmd("ingest")},
	"edge":     {"run a WebSocket edge node", roleCmd("edge")},
	"slicer":   {"run a slicer (segment writer)", roleCmd("slicer")},
	"origin":   {"serve the object store over HTTP (segment origin)", roleCmd("origin")},
	"ticket":   {"mint a business ticket signed with the dev ticket key", runTicket},
	"send":     {"send a comment as a viewer (or an announcement as host)", runSend},
	"watch":    {"join a room and print every message it shows", runWatch},
	"gift":     {"send a gift through the server-to-server gift API", runGift},
	"announce": {"send a host announcement", runAnnounce},
	"replay":   {"print a room's messages of a past time range from its segments", runReplay},
	"audit":    {"print a room's audit trail: every comment with its user and decision", runAudit},
	"event":    {"create, list, change and end events (the operator API)", runEvent},
	"loadgen":  {"load a deployment: commenters, gifts and CDN pollers; rates, latencies, drops", runLoadgen},

	// Sizing a show.
	"calibrate":  {"measure this machine's per-node figures (runs the repository's benchmarks) into a profile", runCalibrate},
	"plan":       {"size a show from an event description and a profile: nodes, CDN, Redis, quotas, .tfvars", runPlan},
	"words":      {"push, show, roll back the fleet's sensitive-word list (versions; every ingest within 1 s)", rulesCmd("words")},
	"limits":     {"push, show, roll back the fleet's rate-limit rules (versions; every node within 1 s)", rulesCmd("limits")},
	"moderation": {"push, show, roll back the fleet's moderation settings: word policy, duplicate window (versions; every ingest within 1 s)", rulesCmd("moderation")},
	"moderate":   {"take a room's published messages down, list its takedowns; list a room's most-reported comments and act on them", runModerate},

	// Setting up a deployment's own services.
	"redis-acl": {"print the roles' Redis ACL users (ACL SETUSER lines or an ACL file)", runRedisACL},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: danmaku <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'danmaku <command> -h' for a command's flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "danmaku: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "danmaku %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "danmaku %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// usageError is a bad flag or argument: exit code 2.
type usageError struct{ error }

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("danmaku "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}

func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("bad -log-level %q", level)}
	}
	opts := &slog.HandlerOptions{Level: l}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
