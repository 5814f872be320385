package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"danmaku/internal/audit"
	"danmaku/internal/objstore"
	"danmaku/internal/stack"
	"danmaku/sdk/wire"
)

// DefaultAuditDir is where `danmaku dev` keeps the audit trail and where
// `danmaku audit` reads it without -audit-s3-bucket: $DANMAKU_AUDIT_DIR,
// else danmaku/audit in the user's cache directory. Never the segments
// directory: the origin serves every file there, and the trail names users
// and what they wrote. Only dev has a default: a role's cache directory may
// be in memory (under systemd, the runtime directory's tmpfs), so ingest and
// slicer are given theirs explicitly (checkAudit).
func DefaultAuditDir() string {
	if d := os.Getenv("DANMAKU_AUDIT_DIR"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "danmaku", "audit")
}

// checkAudit holds the audit trail of an ingest or a slicer to a durable
// destination. Outside dev it is given explicitly: an S3 bucket, or a
// directory that keeps its files across restarts — never one in memory
// (tmpfs, ramfs), which a stop or a reboot wipes although the trail is
// kept for 30 days. dev has its default directory and no check.
func (f *serveFlags) checkAudit(roles []string) error {
	var keepers []string
	for _, r := range roles {
		if r == stack.RoleIngest || r == stack.RoleSlicer {
			keepers = append(keepers, r)
		}
	}
	if len(keepers) == 0 || f.auditBucket != "" {
		return nil
	}
	if f.auditDir == "" {
		return usageError{fmt.Errorf("%s keeps an audit trail and has nowhere durable to keep it: give -audit-s3-bucket [DANMAKU_AUDIT_S3_BUCKET], or -audit-dir [DANMAKU_AUDIT_DIR] on a disk (only dev has a default directory)", strings.Join(keepers, " and "))}
	}
	if f.dev {
		return nil
	}
	fsName, err := memoryFS(f.auditDir)
	if err != nil {
		return fmt.Errorf("-audit-dir %s [DANMAKU_AUDIT_DIR]: %w", f.auditDir, err)
	}
	if fsName != "" {
		return usageError{fmt.Errorf("-audit-dir %s [DANMAKU_AUDIT_DIR] is on %s, in memory: the audit trail would be lost at every stop or reboot; give a directory on a disk, or -audit-s3-bucket [DANMAKU_AUDIT_S3_BUCKET]", f.auditDir, fsName)}
	}
	return nil
}

// auditStoreFlags reach the audit trail's store: a bucket of its own (not
// the segments bucket, which the CDN serves) on the same S3 endpoint,
// region and credentials as the other commands, or a local directory.
type auditStoreFlags struct {
	dir string
	s3  objstore.S3Config
}

// register adds the audit trail's own flags.
func (f *auditStoreFlags) register(ss *settings) {
	fs := ss.fs
	fs.StringVar(&f.dir, "audit-dir", DefaultAuditDir(), "directory of the audit trail without -audit-s3-bucket (dev) [DANMAKU_AUDIT_DIR]")
	fs.StringVar(&f.s3.Bucket, "audit-s3-bucket", env("DANMAKU_AUDIT_S3_BUCKET", ""), "S3 bucket of the audit trail (never the segments bucket) [DANMAKU_AUDIT_S3_BUCKET]")
	fs.StringVar(&f.s3.Prefix, "audit-s3-prefix", env("DANMAKU_AUDIT_S3_PREFIX", ""), "key prefix inside the audit bucket, ending in / [DANMAKU_AUDIT_S3_PREFIX]")
}

// registerShared adds the S3 flags every command shares (endpoint, region,
// addressing), for a command that has no others.
func (f *auditStoreFlags) registerShared(ss *settings) {
	fs := ss.fs
	fs.StringVar(&f.s3.Endpoint, "s3-endpoint", env("DANMAKU_S3_ENDPOINT", ""), "S3-compatible endpoint URL (default: AWS) [DANMAKU_S3_ENDPOINT]")
	fs.StringVar(&f.s3.Region, "s3-region", env("DANMAKU_S3_REGION", ""), "S3 region (default us-east-1) [DANMAKU_S3_REGION]")
	boolVar(ss, &f.s3.PathStyle, "s3-path-style", "DANMAKU_S3_PATH_STYLE", "path-style S3 addressing (most S3-compatible servers)")
}

// open returns the store; credentials come from the environment only, as
// for every role.
func (f *auditStoreFlags) open(ctx context.Context) (audit.ReadStore, error) {
	if f.s3.Bucket != "" {
		f.s3.AccessKey = os.Getenv("DANMAKU_S3_ACCESS_KEY")
		f.s3.SecretKey = os.Getenv("DANMAKU_S3_SECRET_KEY")
		s, err := objstore.NewS3Store(ctx, f.s3)
		if err != nil {
			return nil, usageError{err}
		}
		return s, nil
	}
	if f.dir == "" {
		return nil, usageError{errors.New("-audit-dir or -audit-s3-bucket")}
	}
	if _, err := os.Stat(f.dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no audit trail in %s: nothing recorded there yet, or the trail is elsewhere (-audit-dir, -audit-s3-bucket)", f.dir)
	} else if err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	return objstore.NewDirStore(f.dir)
}

// parseWhen reads -since/-until: a duration back from now ("10m") or an
// RFC 3339 time.
func parseWhen(name, s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, usageError{fmt.Errorf("-%s %s: a duration back from now is positive", name, s)}
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageError{fmt.Errorf("-%s %q: a duration (10m) or an RFC 3339 time", name, s)}
	}
	return t, nil
}

// auditJSON is a record as -json prints it.
type auditJSON struct {
	Time string `json:"time"`
	audit.Record
}

// auditArgs are `danmaku audit`'s flags.
type auditArgs struct {
	room, since, until, user string
	json                     bool
	store                    auditStoreFlags
	settings                 settings
}

func (a *auditArgs) register(fs *flag.FlagSet) {
	ss := &a.settings
	ss.fs = fs
	fs.StringVar(&a.room, "room", "", "room id (required)")
	fs.StringVar(&a.since, "since", "10m", "from: a duration back from now, or an RFC 3339 time")
	fs.StringVar(&a.until, "until", "", "until (excluded): a duration back from now, or an RFC 3339 time (default: now)")
	fs.StringVar(&a.user, "user", "", "only this user's comments")
	boolVar(ss, &a.json, "json", "", "print records as JSON lines")
	a.store.register(ss)
	a.store.registerShared(ss)
}

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("audit", stderr)
	var a auditArgs
	a.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := a.settings.err(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if !wire.ValidRoom(a.room) {
		return usageError{fmt.Errorf("-room %q: 1-64 of A-Z a-z 0-9 _ -", a.room)}
	}
	now := time.Now()
	q := audit.Query{Room: a.room, User: a.user}
	var err error
	if q.Since, err = parseWhen("since", a.since, now); err != nil {
		return err
	}
	if a.until != "" {
		if q.Until, err = parseWhen("until", a.until, now); err != nil {
			return err
		}
		if !q.Since.Before(q.Until) {
			return usageError{errors.New("-since must be before -until")}
		}
	}
	store, err := a.store.open(ctx)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	n, lost := 0, int64(0)
	err = audit.Read(ctx, store, q, func(r audit.Record) error {
		n++
		if a.json {
			return enc.Encode(auditJSON{Time: r.At.UTC().Format(time.RFC3339Nano), Record: r})
		}
		_, err := fmt.Fprintln(stdout, formatAudit(r))
		return err
	}, func(key string, h audit.Header) error {
		lost += h.Lost
		fmt.Fprintf(stderr, "warning: %d records of node %s were lost before %s (memory bound or shutdown; see danmaku_audit_records_lost_total)\n", h.Lost, h.Node, key)
		return nil
	})
	fmt.Fprintf(stderr, "%d records of room %s from %s", n, a.room, q.Since.UTC().Format(time.RFC3339))
	if lost > 0 {
		fmt.Fprintf(stderr, "; %d lost", lost)
	}
	fmt.Fprintln(stderr)
	return err
}

// formatAudit is one record as a line: time, user, decision[/reason],
// text quoted (so that a line is a record whatever the text holds), and
// what viewers saw when it differs.
func formatAudit(r audit.Record) string {
	d := string(r.Decision)
	if r.Reason != "" {
		d += "/" + r.Reason
	}
	s := r.At.UTC().Format("2006-01-02T15:04:05.000Z") + "  " + r.User + "  " + d + "  " + strconv.Quote(r.Text)
	if r.Shown != "" {
		s += "  shown " + strconv.Quote(r.Shown)
	}
	if r.ID != "" {
		s += "  id " + r.ID
	}
	return s
}
