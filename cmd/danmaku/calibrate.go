package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"danmaku/internal/calibrate"
)

// runCalibrate measures this machine's per-node figures by running the
// repository's benchmarks and writes the profile `danmaku plan` reads.
func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("calibrate", stderr)
	out := fs.String("out", "", "write the profile (JSON) to this file; empty: standard output")
	quick := fs.Bool("quick", false, "smaller benchmark runs (about half the time)")
	src := fs.String("src", ".", "root of the danmaku source tree (the benchmarks are its test code; needs the go command and redis-server)")
	if err := parse(fs, args); err != nil {
		return err
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
