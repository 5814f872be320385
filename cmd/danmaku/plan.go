package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"danmaku/internal/plan"
)

// runPlan sizes a show: an event description and a profile in, the table,
// and on request the .tfvars, the quota checklist and the service levels
// out.
func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", stderr)
	eventFile := fs.String("event", "", "the event description (JSON; docs/operations.md, \"Sizing a show\")")
	profileFile := fs.String("profile", "", "the profile `danmaku calibrate` wrote on the target instance type")
	tfvars := fs.String("tfvars", "", "write infra/terraform's sizing variables to this .tfvars")
	quota := fs.String("quota", "", "write the quota checklist (markdown) to this file")
	sloOut := fs.String("slo-out", "", "write the plan's service levels (JSON) to this file")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *eventFile == "" || *profileFile == "" {
		return usageError{fmt.Errorf("-event and -profile are required")}
	}
	pl, err := planFiles(*eventFile, *profileFile)
	if err != nil {
		return err
	}
	if err := pl.WriteTable(stdout); err != nil {
		return err
	}
	for _, o := range []struct {
		path  string
		write func(io.Writer) error
	}{
		{*tfvars, func(w io.Writer) error { return pl.WriteTfvars(w, *eventFile, *profileFile) }},
		{*quota, pl.WriteQuota},
		{*sloOut, pl.WriteSLO},
	} {
		if o.path == "" {
			continue
		}
		var b bytes.Buffer
		if err := o.write(&b); err != nil {
			return err
		}
		if err := os.WriteFile(o.path, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// planFiles reads both documents and computes the plan; an error names
// the file and, for a bad document, the field.
func planFiles(eventFile, profileFile string) (*plan.Plan, error) {
	eb, err := os.ReadFile(eventFile)
	if err != nil {
		return nil, err
	}
	ev, err := plan.DecodeEvent(eb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", eventFile, err)
	}
	pb, err := os.ReadFile(profileFile)
	if err != nil {
		return nil, err
	}
	pr, err := plan.DecodeProfile(pb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileFile, err)
	}
	return plan.New(ev, pr)
}
