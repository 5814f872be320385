package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"danmaku/internal/stack"
)

type serveFlags struct {
	gslb, ingest, edge, origin, slicer string
	cdn, data                          string
	budget                             int
	minGift                            int64
	logLevel                           string
	logJSON                            bool
}

func (f *serveFlags) register(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
	Int64Var(*int64, string, int64, string)
	BoolVar(*bool, string, bool, string)
}) {
	fs.StringVar(&f.gslb, "gslb", stack.DefaultGSLBAddr, "gslb listen address")
	fs.StringVar(&f.ingest, "ingest", stack.DefaultIngestAddr, "ingest listen address")
	fs.StringVar(&f.edge, "edge", stack.DefaultEdgeAddr, "edge listen address")
	fs.StringVar(&f.origin, "origin", stack.DefaultOriginAddr, "segment origin listen address")
	fs.StringVar(&f.slicer, "slicer", stack.DefaultSlicerAddr, "slicer metrics/health listen address")
	fs.StringVar(&f.cdn, "cdn", "", "CDN base URL handed to clients (default: this process's origin)")
	fs.StringVar(&f.data, "data", "", "directory to keep segments in (default: memory)")
	fs.IntVar(&f.budget, "budget", 0, "messages per second per room (default 60)")
	fs.Int64Var(&f.minGift, "min-gift-value", 0, "lowest gift value the edge pushes (default: all)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
}

func serveRoles(ctx context.Context, roles []string, f *serveFlags, stdout, stderr io.Writer) error {
	log, err := newLogger(stderr, f.logLevel, f.logJSON)
	if err != nil {
		return err
	}
	st, err := stack.New(stack.Config{
		Roles:    roles,
		GSLBAddr: f.gslb, IngestAddr: f.ingest, EdgeAddr: f.edge, OriginAddr: f.origin, SlicerAddr: f.slicer,
		PublicCDN: f.cdn, DataDir: f.data, Budget: f.budget, MinGiftValue: f.minGift, Logger: log,
	})
	if err != nil {
		return err
	}
	for _, role := range stack.AllRoles {
		if u, ok := st.URLs[role]; ok {
			fmt.Fprintf(stdout, "%-7s listening on %s\n", role, u)
		}
	}
	if _, ok := st.URLs[stack.RoleGSLB]; ok {
		fmt.Fprintf(stdout, "entry:  %s/v1/entry?room=demo (ticket: danmaku ticket -user alice)\n", st.URLs[stack.RoleGSLB])
	}
	fmt.Fprintln(stdout, "press Ctrl-C to stop")
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync()
	}
	err = st.Run(ctx)
	fmt.Fprintln(stdout, "stopped")
	return err
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", stderr)
	var f serveFlags
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	return serveRoles(ctx, stack.AllRoles, &f, stdout, stderr)
}

// roleCmd runs one role. Until the Redis and S3 backends are wired, a role
// started alone shares nothing with other processes; `dev` is the way to run
// the pipeline.
func roleCmd(role string) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(role, stderr)
		var f serveFlags
		f.register(fs)
		if err := parse(fs, args); err != nil {
			return err
		}
		roles := []string{role}
		if role == stack.RoleGSLB && f.cdn == "" {
			f.cdn = "http://" + f.origin + "/"
		}
		return serveRoles(ctx, roles, &f, stdout, stderr)
	}
}
