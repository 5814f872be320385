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

// rulesCmd is `danmaku words`, `danmaku limits` and `danmaku moderation`: the operator's client
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

// rulesArgs is one `danmaku words|limits|moderation SUB` command line, parsed.
type rulesArgs struct {
	kind, sub, file string
	ingestURL       string
	note            string
	version, to, n  int64
}

func runRules(ctx context.Context, kind string, args []string, stdout, stderr io.Writer) error {
	ra, err := parseRules(kind, args, stderr)
	if err != nil {
		return err
	}
	rc := rulesClient{ctx: ctx, kind: kind, stdout: stdout, stderr: stderr,
		key:  env("DANMAKU_OPERATOR_KEY", stack.DevServiceKey),
		base: strings.TrimRight(ra.ingestURL, "/") + "/v1/admin/rules/" + kind,
		q:    url.Values{}}
	if ra.note != "" {
		rc.q.Set("note", ra.note)
	}
	switch ra.sub {
	case "push":
		body, err := os.ReadFile(ra.file)
		if err != nil {
			return err
		}
		return rc.write(http.MethodPut, "", body)
	case "rollback":
		if ra.to > 0 {
			rc.q.Set("to", strconv.FormatInt(ra.to, 10))
		}
		return rc.write(http.MethodPost, "/rollback", nil)
	case "show":
		return rc.show(ra.version)
	default: // history
		return rc.history(ra.n)
	}
}

// parseRules reads the subcommand, its flags and its arguments.
func parseRules(kind string, args []string, stderr io.Writer) (rulesArgs, error) {
	const subs = "push, show, rollback, history"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return rulesArgs{}, usageError{fmt.Errorf("%s: a subcommand: %s", kind, subs)}
	}
	ra := rulesArgs{kind: kind, sub: args[0]}
	fs := newFlags(kind+" "+ra.sub, stderr)
	fs.StringVar(&ra.ingestURL, "ingest", "http://"+stack.DefaultIngestAddr, "an ingest's base URL (the rules API)")
	switch ra.sub {
	case "push":
		fs.StringVar(&ra.note, "note", "", "why, recorded with the version (at most 200 bytes)")
	case "rollback":
		fs.StringVar(&ra.note, "note", "", "why, recorded with the version (at most 200 bytes)")
		fs.Int64Var(&ra.to, "to", 0, "the version to put back in force (default: the one before the version in force)")
	case "show":
		fs.Int64Var(&ra.version, "version", 0, "the version to show (default: the one in force)")
	case "history":
		fs.Int64Var(&ra.n, "n", 20, "how many versions, newest first (at most 50 are kept)")
	default:
		return rulesArgs{}, usageError{fmt.Errorf("%s: unknown subcommand %q (%s)", kind, ra.sub, subs)}
	}
	if err := parse(fs, args[1:]); err != nil {
		return rulesArgs{}, err
	}
	wantArgs := 0
	if ra.sub == "push" {
		wantArgs = 1
	}
	if fs.NArg() != wantArgs {
		if wantArgs == 1 {
			return rulesArgs{}, usageError{fmt.Errorf("%s push: one FILE", kind)}
		}
		return rulesArgs{}, usageError{fmt.Errorf("%s %s: unexpected argument %q", kind, ra.sub, fs.Arg(0))}
	}
	ra.file = fs.Arg(0)
	for _, f := range []struct {
		name string
		v    int64
	}{{"version", ra.version}, {"to", ra.to}, {"n", ra.n}} {
		if f.v < 0 {
			return rulesArgs{}, usageError{fmt.Errorf("-%s %d: want a version number from 1", f.name, f.v)}
		}
	}
	return ra, nil
}

// rulesClient calls one kind's rules API with the operator key.
type rulesClient struct {
	ctx            context.Context
	kind, key      string
	base           string
	q              url.Values
	stdout, stderr io.Writer
}

func (rc rulesClient) url(path string) string {
	if len(rc.q) == 0 {
		return rc.base + path
	}
	return rc.base + path + "?" + rc.q.Encode()
}

// write makes a new version and says which.
func (rc rulesClient) write(method, path string, body []byte) error {
	var v rules.Version
	if err := apiCall(rc.ctx, method, rc.url(path), rc.key, body, &v); err != nil {
		return err
	}
	printVersion(rc.stdout, rc.kind, v)
	return nil
}

// show prints a version's document alone on stdout, so that `show > file`
// and `push file` round-trip; what it is goes to stderr.
func (rc rulesClient) show(version int64) error {
	if version > 0 {
		rc.q.Set("version", strconv.FormatInt(version, 10))
	}
	var a rules.VersionAnswer
	if err := apiCall(rc.ctx, http.MethodGet, rc.url(""), rc.key, nil, &a); err != nil {
		return err
	}
	printVersion(rc.stderr, rc.kind, a.Version)
	_, err := io.WriteString(rc.stdout, a.Document)
	return err
}

// history prints who pushed what, newest first.
func (rc rulesClient) history(n int64) error {
	if n > 0 {
		rc.q.Set("n", strconv.FormatInt(n, 10))
	}
	var h struct {
		Versions []rules.Version `json:"versions"`
	}
	if err := apiCall(rc.ctx, http.MethodGet, rc.url("/history"), rc.key, nil, &h); err != nil {
		return err
	}
	if len(h.Versions) == 0 {
		return errors.New(rc.kind + ": nothing pushed yet")
	}
	tw := tabwriter.NewWriter(rc.stdout, 0, 4, 2, ' ', 0)
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

// printVersion says which version of kind is meant, in one line.
func printVersion(w io.Writer, kind string, v rules.Version) {
	what := "version"
	if v.RollbackOf > 0 {
		what = fmt.Sprintf("version (a rollback to %d)", v.RollbackOf)
	}
	fmt.Fprintf(w, "%s %s %d: %d bytes, sha256 %.12s, by %s at %s\n", kind, what, v.Version, v.Size, v.SHA256, v.By, v.At.Format(time.RFC3339))
}
