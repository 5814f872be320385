package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"danmaku/internal/rules"
	"danmaku/internal/stack"
)

// rulesCmd is `danmaku words` and `danmaku limits`: the operator's client
// of the rules API (on any ingest), for one kind of document.
//
//	danmaku words push FILE [-note WHY]    a new version, in force on every node within a second
//	danmaku words show [-version N]        the document (the head by default) on stdout, its version on stderr
//	danmaku words rollback [-to N]         a new version copying N (default: the one before the head)
//	danmaku words history [-n 20]          who pushed what, newest first
//
// The operator key comes from DANMAKU_OPERATOR_KEY (a secret is never a
// flag); `danmaku dev`'s public key is the default, which every other
// deployment refuses.
func rulesCmd(kind string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runRules(ctx, kind, args, stdout, stderr)
	}
}

func runRules(ctx context.Context, kind string, args []string, stdout, stderr io.Writer) error {
	const subs = "push, show, rollback, history"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{fmt.Errorf("%s: a subcommand: %s", kind, subs)}
	}
	sub := args[0]
	fs := newFlags(kind+" "+sub, stderr)
	ingestURL := fs.String("ingest", "http://"+stack.DefaultIngestAddr, "an ingest's base URL (the rules API)")
	var note *string
	var version, to, n *int64
	switch sub {
	case "push":
		note = fs.String("note", "", "why, recorded with the version (at most 200 bytes)")
	case "rollback":
		note = fs.String("note", "", "why, recorded with the version (at most 200 bytes)")
		to = fs.Int64("to", 0, "the version to put back in force (default: the one before the version in force)")
	case "show":
		version = fs.Int64("version", 0, "the version to show (default: the one in force)")
	case "history":
		n = fs.Int64("n", 20, "how many versions, newest first (at most 50 are kept)")
	default:
		return usageError{fmt.Errorf("%s: unknown subcommand %q (%s)", kind, sub, subs)}
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	wantArgs := 0
	if sub == "push" {
		wantArgs = 1
	}
	if fs.NArg() != wantArgs {
		if wantArgs == 1 {
			return usageError{fmt.Errorf("%s push: one FILE", kind)}
		}
		return usageError{fmt.Errorf("%s %s: unexpected argument %q", kind, sub, fs.Arg(0))}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"version", version}, {"to", to}, {"n", n}} {
		if f.v != nil && *f.v < 0 {
			return usageError{fmt.Errorf("-%s %d: want a version number from 1", f.name, *f.v)}
		}
	}
	key := env("DANMAKU_OPERATOR_KEY", stack.DevServiceKey)
	base := strings.TrimRight(*ingestURL, "/") + "/v1/admin/rules/" + kind
	q := url.Values{}
	if note != nil && *note != "" {
		q.Set("note", *note)
	}
	query := func() string {
		if len(q) == 0 {
			return ""
		}
		return "?" + q.Encode()
	}
	// write makes a new version and says which.
	write := func(method, u string, body []byte) error {
		var v rules.Version
		if err := apiCall(ctx, method, u, key, body, &v); err != nil {
			return err
		}
		printVersion(stdout, kind, v)
		return nil
	}
	switch sub {
	case "push":
		body, err := os.ReadFile(fs.Arg(0))
		if err != nil {
			return err
		}
		return write(http.MethodPut, base+query(), body)
	case "rollback":
		if *to > 0 {
			q.Set("to", strconv.FormatInt(*to, 10))
		}
		return write(http.MethodPost, base+"/rollback"+query(), nil)
	case "show":
		if *version > 0 {
			q.Set("version", strconv.FormatInt(*version, 10))
		}
		var a rules.VersionAnswer
		if err := apiCall(ctx, http.MethodGet, base+query(), key, nil, &a); err != nil {
			return err
		}
		// The document alone on stdout, so that `show > file` and `push
		// file` round-trip; what it is on stderr.
		printVersion(stderr, kind, a.Version)
		if _, err := io.WriteString(stdout, a.Document); err != nil {
			return err
		}
	case "history":
		if *n > 0 {
			q.Set("n", strconv.FormatInt(*n, 10))
		}
		var h struct {
			Versions []rules.Version `json:"versions"`
		}
		if err := apiCall(ctx, http.MethodGet, base+"/history"+query(), key, nil, &h); err != nil {
			return err
		}
		if len(h.Versions) == 0 {
			return errors.New(kind + ": nothing pushed yet")
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tAT\tBY\tSIZE\tSHA256\tROLLBACK OF\tNOTE")
		for _, v := range h.Versions {
			rb := ""
			if v.RollbackOf > 0 {
				rb = strconv.FormatInt(v.RollbackOf, 10)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.12s\t%s\t%s\n", v.Version, v.At.Format(time.RFC3339), v.By, v.Size, v.SHA256, rb, v.Note)
		}
		return tw.Flush()
	}
	return nil
}

// printVersion says which version of kind is meant, in one line.
func printVersion(w io.Writer, kind string, v rules.Version) {
	what := "version"
	if v.RollbackOf > 0 {
		what = fmt.Sprintf("version (a rollback to %d)", v.RollbackOf)
	}
	fmt.Fprintf(w, "%s %s %d: %d bytes, sha256 %.12s, by %s at %s\n", kind, what, v.Version, v.Size, v.SHA256, v.By, v.At.Format(time.RFC3339))
}
