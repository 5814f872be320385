// Command s3bucket prepares the local S3 server for the CDN: it waits until
// the server answers, then creates the bucket (if missing) with the policy
// that lets anyone GetObject but not list. infra/local/s3.sh runs it; it is
// idempotent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"danmaku/internal/testenv"
)

func main() {
	var env testenv.S3Env
	flag.StringVar(&env.Endpoint, "endpoint", "http://127.0.0.1:7070", "S3 server base URL")
	flag.StringVar(&env.Region, "region", testenv.S3Region, "signing region")
	flag.StringVar(&env.AccessKey, "access-key", os.Getenv("DANMAKU_S3_ACCESS_KEY"), "access key (default $DANMAKU_S3_ACCESS_KEY)")
	flag.StringVar(&env.SecretKey, "secret-key", os.Getenv("DANMAKU_S3_SECRET_KEY"), "secret key (default $DANMAKU_S3_SECRET_KEY)")
	flag.StringVar(&env.Bucket, "bucket", testenv.S3Bucket, "bucket to create")
	wait := flag.Duration("wait", 15*time.Second, "how long to retry while the server starts")
	flag.Parse()
	if env.AccessKey == "" || env.SecretKey == "" {
		fmt.Fprintln(os.Stderr, "s3bucket: -access-key and -secret-key (or DANMAKU_S3_ACCESS_KEY/DANMAKU_S3_SECRET_KEY) are required")
		os.Exit(2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	for {
		err := testenv.SetupBucket(ctx, env)
		if err == nil {
			fmt.Printf("s3bucket: bucket %s ready at %s (anonymous GetObject allowed)\n", env.Bucket, env.BucketURL())
			return
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "s3bucket: %v\n", err)
			os.Exit(1)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
