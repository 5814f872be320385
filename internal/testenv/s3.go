package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Defaults of the S3 server started by S3 and by infra/local/s3.sh.
const (
	// S3Bucket is the bucket segments and manifests are written to.
	S3Bucket = "danmaku"
	// S3Region is the region the server and its clients agree on.
	S3Region = "us-east-1"

	s3AccessKey = "danmaku-test"
	s3SecretKey = "danmaku-test-secret"
	// s3HealthPath is served by versitygw (--health) without authentication,
	// so readiness needs no signed request.
	s3HealthPath = "/_health"
)

// S3Env describes a running S3-compatible server and its bucket.
type S3Env struct {
	// Endpoint is the server's base URL, e.g. "http://127.0.0.1:7070".
	Endpoint string
	// Region is the signing region.
	Region string
	// AccessKey and SecretKey are the root credentials.
	AccessKey string
	SecretKey string
	// Bucket exists and lets anyone GetObject (not list), like a bucket
	// behind a CDN.
	Bucket string
}

// BucketURL is the path-style public base URL of the bucket: an object key k
// is readable anonymously at BucketURL()+"/"+k. It is what a CDN (Varnish)
// uses as its backend.
func (e S3Env) BucketURL() string { return e.Endpoint + "/" + e.Bucket }

// Client returns an aws-sdk-go-v2 S3 client for the server: static
// credentials, path-style addressing, and checksums only where the API
// requires them (S3-compatible servers vary in their support of the SDK's
// default trailing checksums).
func (e S3Env) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:                     e.Region,
		BaseEndpoint:               aws.String(e.Endpoint),
		Credentials:                credentials.NewStaticCredentialsProvider(e.AccessKey, e.SecretKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	})
}

// S3 starts versitygw (posix backend) for t on a free loopback port, creates
// the bucket S3Bucket with an anonymous-read policy, and returns how to reach
// it. The server is stopped when t ends.
func S3(t testing.TB) S3Env {
	t.Helper()
	bin := versitygwBinary.require(t)
	port := serve(t, "versitygw", bin, t.TempDir(),
		func(port int, dir string) ([]string, error) {
			return versitygwArgs("127.0.0.1:"+strconv.Itoa(port), s3AccessKey, s3SecretKey, S3Region, filepath.Join(dir, "data"))
		},
		func(port int) error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d%s", port, s3HealthPath)) })
	env := S3Env{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", port),
		Region:    S3Region,
		AccessKey: s3AccessKey,
		SecretKey: s3SecretKey,
		Bucket:    S3Bucket,
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := SetupBucket(ctx, env); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return env
}

// versitygwArgs returns the versitygw command line that serves the posix
// directory root on listen with the given root credentials, creating root.
// infra/local/s3.sh runs the same flags.
func versitygwArgs(listen, accessKey, secretKey, region, root string) ([]string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	return []string{
		"--port", listen,
		"--access", accessKey,
		"--secret", secretKey,
		"--region", region,
		"--health", s3HealthPath,
		// Without it every request opens a new connection; the SDK and
		// Varnish both reuse connections.
		"--keep-alive",
		// Per-request logging would drown the test log.
		"--quiet",
		"posix", root,
	}, nil
}

// anonymousReadPolicy returns the bucket policy that lets anyone GetObject in
// bucket — what a CDN needs to fetch segments — but not list it.
func anonymousReadPolicy(bucket string) string {
	return `{"Version":"2012-10-17","Statement":[{"Sid":"PublicReadObjects","Effect":"Allow",` +
		`"Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::` + bucket + `/*"}]}`
}

// SetupBucket creates env.Bucket if it does not exist and sets its
// anonymous-read policy. It is idempotent.
func SetupBucket(ctx context.Context, env S3Env) error {
	c := env.Client()
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(env.Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		return fmt.Errorf("create bucket %s: %w", env.Bucket, err)
	}
	_, err = c.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{
		Bucket: aws.String(env.Bucket),
		Policy: aws.String(anonymousReadPolicy(env.Bucket)),
	})
	if err != nil {
		return fmt.Errorf("put policy on bucket %s: %w", env.Bucket, err)
	}
	return nil
}

// httpOK GETs url and wants 200.
func httpOK(url string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
