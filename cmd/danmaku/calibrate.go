package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"danmaku/internal/calibrate"
	"danmaku/internal/plan"
)

// runCalibrate measures this machine's per-node figures by running the
// repository's benchmarks and writes the profile `danmaku plan` reads.
func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("calibrate", stderr)
	out := fs.String("out", "", "write the profile (JSON) to this file; empty: standard output")
	quick := fs.Bool("quick", false, "smaller benchmark runs (about half the time)")
	src := fs.String("src", ".", "root of the danmaku source tree (the benchmarks are its test code; needs the go command, redis-server and versitygw)")
	compare := fs.Bool("compare", false, "measure nothing: print the measured figures of the profiles named as arguments (2 or more), their median and run-to-run spread (± (max-min)/2/median)")
	limit := fs.Float64("limit", 15, "with -compare: the spread, in percent, above which a figure is marked over")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *compare {
		return compareProfiles(fs.Args(), *limit, stdout)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	p, err := calibrate.Run(ctx, calibrate.Config{
		Dir:      *src,
		Quick:    *quick,
		Progress: stderr,
		Command:  strings.Join(append([]string{"danmaku", "calibrate"}, args...), " "),
	})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

// compareProfiles prints the spread of the profiles in files. Figures over
// the limit are reported in the table, not as an error: on a loaded
// machine a spread is a finding.
func compareProfiles(files []string, limit float64, stdout io.Writer) error {
	if len(files) < 2 {
		return usageError{fmt.Errorf("-compare needs two or more profile files, got %d", len(files))}
	}
	if !(limit > 0) {
		return usageError{fmt.Errorf("-limit %v: a percentage above 0", limit)}
	}
	ps := make([]*plan.Profile, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if ps[i], err = plan.DecodeProfile(b); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	_, err := calibrate.Compare(stdout, ps, limit/100)
	return err
}
