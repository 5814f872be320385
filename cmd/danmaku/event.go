package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"danmaku/internal/stack"
)

// runEvent is `danmaku event`: the operator's client of the events API.
//
//	danmaku event create -f concert.yaml     create from a YAML or JSON file
//	danmaku event update -f concert.yaml     replace (settings, times, rooms) at run time
//	danmaku event list | get ID | end ID | delete ID
//
// The operator key comes from DANMAKU_OPERATOR_KEY (a secret is never a
// flag); `danmaku dev`'s public key is the default. In a file, start and end
// are RFC 3339 times, or "now", "now+90m", "+2h" for rehearsals.
func runEvent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{errors.New("event: a subcommand: create, update, list, get, end, delete")}
	}
	sub := args[0]
	fs := newFlags("event "+sub, stderr)
	gslb := fs.String("gslb", "http://"+stack.DefaultGSLBAddr, "gslb base URL (the events API)")
	file := fs.String("f", "", "event file, YAML or JSON (create, update)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	key := env("DANMAKU_OPERATOR_KEY", stack.DevServiceKey)
	base := strings.TrimRight(*gslb, "/") + "/v1/admin/events"
	arg := func() (string, error) {
		if fs.NArg() != 1 {
			return "", usageError{fmt.Errorf("event %s: one event id", sub)}
		}
		return url.PathEscape(fs.Arg(0)), nil
	}
	var (
		out    json.RawMessage
		err    error
		method = http.MethodGet
		u      = base
		body   any
	)
	switch sub {
	case "create", "update":
		if *file == "" {
			return usageError{fmt.Errorf("event %s: -f FILE", sub)}
		}
		ev, lerr := loadEventFile(*file, time.Now())
		if lerr != nil {
			return lerr
		}
		body = ev
		method = http.MethodPost
		if sub == "update" {
			id, _ := ev["id"].(string)
			method, u = http.MethodPut, base+"/"+url.PathEscape(id)
		}
	case "list":
	case "get", "end", "delete":
		id, aerr := arg()
		if aerr != nil {
			return aerr
		}
		u = base + "/" + id
		switch sub {
		case "end":
			method, u = http.MethodPost, u+"/end"
		case "delete":
			method = http.MethodDelete
		}
	default:
		return usageError{fmt.Errorf("event: unknown subcommand %q (create, update, list, get, end, delete)", sub)}
	}
	if err = apiCall(ctx, method, u, key, body, &out); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") == nil {
		out = pretty.Bytes()
	}
	fmt.Fprintln(stdout, string(out))
	return nil
}

// loadEventFile reads an event from YAML or JSON (YAML is a superset) and
// resolves relative times against now. The server validates the rest.
func loadEventFile(path string, now time.Time) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ev map[string]any
	if err := yaml.Unmarshal(b, &ev); err != nil {
		return nil, fmt.Errorf("event file %s: %w", path, err)
	}
	if ev == nil {
		return nil, fmt.Errorf("event file %s: empty", path)
	}
	for _, k := range []string{"start", "end"} {
		v, ok := ev[k]
		if !ok {
			continue
		}
		t, err := resolveTime(v, now)
		if err != nil {
			return nil, fmt.Errorf("event file %s: %s: %w", path, k, err)
		}
		ev[k] = t.UTC().Format(time.RFC3339Nano)
	}
	return ev, nil
}

// resolveTime reads an RFC 3339 time, "now", "now+D" or "+D" (D a Go
// duration such as 90m or 2h).
func resolveTime(v any, now time.Time) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t, nil
	case string:
		s := strings.TrimSpace(t)
		rel, isRel := strings.CutPrefix(s, "now")
		if isRel || strings.HasPrefix(s, "+") {
			if !isRel {
				rel = s
			}
			if rel == "" {
				return now, nil
			}
			d, err := time.ParseDuration(strings.TrimPrefix(rel, "+"))
			if err != nil || !strings.HasPrefix(rel, "+") {
				return time.Time{}, fmt.Errorf("%q is not now, now+DURATION or +DURATION", s)
			}
			return now.Add(d), nil
		}
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-12-24T20:00:00Z)", s)
		}
		return ts, nil
	}
	return time.Time{}, fmt.Errorf("%v is not a time", v)
}
