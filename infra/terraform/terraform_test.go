// Package terraform_test runs the Terraform module's own checks from `go
// test ./...` (and so from `make test`): test.sh, which needs terraform and
// the hashicorp/aws provider but no AWS account, and an apply of the
// segments bucket to a real S3-compatible server (versitygw).
//
// A missing terraform or provider skips these tests, unless
// testenv.RequireServers() (CI or DANMAKU_REQUIRE_SERVERS) says tools are
// required; then it fails them. test.sh says how to install what is missing.
package terraform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"danmaku/internal/testenv"
)

// scriptSkipped is test.sh's exit status for "terraform or the provider is
// missing, and nothing requires them".
const scriptSkipped = 3

// runScript runs test.sh with args and extra environment, and returns its
// standard output. It skips t when the script did, and fails t when the
// script failed or when a skip is not allowed.
func runScript(t *testing.T, timeout time.Duration, env []string, args ...string) string {
	t.Helper()
	return execScript(guardLimit(t, timeout), env, args...).check(t)
}

// guardLimit is how long test.sh may run before the test calls it hung: at
// least want, and longer when the test binary's own -timeout allows (less
// a minute to report it). The limit is a guard, not a measure: terraform
// test is CPU-bound, and a 2-core machine under a CPU hog beside other
// work ran the module's checks past 15 minutes.
func guardLimit(t *testing.T, want time.Duration) time.Duration {
	if d, ok := t.Deadline(); ok {
		return max(want, time.Until(d)-time.Minute)
	}
	return want
}

// scriptRun is what one run of test.sh did.
type scriptRun struct {
	args           []string
	timeout        time.Duration
	noBash         error
	stdout, stderr string
	err            error
	timedOut       bool
	took           time.Duration
}

// execScript runs test.sh without a testing.T, so that it may run in a
// goroutine of its own; check says what the run means for the test.
func execScript(timeout time.Duration, env []string, args ...string) scriptRun {
	r := scriptRun{args: args, timeout: timeout}
	bash, err := exec.LookPath("bash")
	if err != nil {
		r.noBash = err
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, append([]string{"test.sh"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	r.err = cmd.Run()
	r.took = time.Since(start)
	r.timedOut = ctx.Err() != nil
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

// check returns the run's standard output, or skips or fails t.
func (r scriptRun) check(t *testing.T) string {
	t.Helper()
	if r.noBash != nil {
		skipOrFail(t, "bash not found: test.sh needs it")
	}
	var exit *exec.ExitError
	switch {
	case r.err == nil:
		t.Logf("test.sh %s: ok in %v\n%s", strings.Join(r.args, " "), r.took.Round(time.Second), summary(r.stderr))
		return r.stdout
	case errors.As(r.err, &exit) && exit.ExitCode() == scriptSkipped:
		skipOrFail(t, r.stderr)
	case r.timedOut:
		t.Fatalf("test.sh %s: no result after %v\n%s", strings.Join(r.args, " "), r.timeout, r.stderr)
	default:
		t.Fatalf("test.sh %s: %v\n%s", strings.Join(r.args, " "), r.err, r.stderr)
	}
	return ""
}

func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if testenv.RequireServers() {
		t.Fatalf("%s\n[tools are required: CI or DANMAKU_REQUIRE_SERVERS is set]", msg)
	}
	t.Skip(msg)
}

// summary keeps the lines of test.sh's log that say what ran and how it
// went, for `go test -v`.
func summary(log string) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "test.sh:") || strings.HasPrefix(line, "Success!") || strings.HasPrefix(line, "Failure!") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// TestModule: fmt, validate, and terraform test with a mocked AWS provider
// (cache TTLs, the bucket policy, IAM scopes, Redis cluster mode, public
// edge and ingest addresses, the examples).
func TestModule(t *testing.T) {
	t.Parallel()
	// Ten minutes on a quiet machine would be generous; a CI machine
	// running every package at once has taken eight; a CPU hog beside
	// other work, more than fifteen (guardLimit lets the binary's
	// -timeout decide).
	runScript(t, 15*time.Minute, nil, "check")
}

// TestSegmentsBucketOnS3 applies modules/segments-bucket to versitygw and
// reads back what the provider did: the bucket exists, objects belong to
// the bucket owner, and the stored policy is the one Terraform rendered.
//
// versitygw (v1.8.0, posix backend) implements the bucket, ownership
// controls and bucket policy APIs, so those are applied for real. It
// answers 501 NotImplemented to the public access block, default
// encryption and lifecycle APIs, and refuses as MalformedPolicy a Service
// principal and the AWS:SourceArn condition key, so the module is applied
// without those (aws_controls = false, no CloudFront distribution); the
// mocked tests in tests/ and modules/segments-bucket/tests check them.
func TestSegmentsBucketOnS3(t *testing.T) {
	t.Parallel()
	env := testenv.S3(t)
	const bucket = "danmaku-tf-segments"
	out := runScript(t, 5*time.Minute, []string{
		"DANMAKU_TF_S3_ENDPOINT=" + env.Endpoint,
		"DANMAKU_TF_S3_ACCESS_KEY=" + env.AccessKey,
		"DANMAKU_TF_S3_SECRET_KEY=" + env.SecretKey,
		"DANMAKU_TF_S3_REGION=" + env.Region,
		"DANMAKU_TF_S3_BUCKET=" + bucket,
	}, "s3-apply")

	var outputs struct {
		Bucket struct{ Value string } `json:"bucket"`
		Policy struct{ Value string } `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &outputs); err != nil {
		t.Fatalf("terraform output -json: %v\n%s", err, out)
	}
	if outputs.Bucket.Value != bucket {
		t.Fatalf("bucket output = %q, want %q", outputs.Bucket.Value, bucket)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := env.Client()
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("HeadBucket %s after apply: %v", bucket, err)
	}

	own, err := c.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("GetBucketOwnershipControls: %v", err)
	}
	if rules := own.OwnershipControls.Rules; len(rules) != 1 || rules[0].ObjectOwnership != types.ObjectOwnershipBucketOwnerEnforced {
		t.Errorf("ownership controls = %+v, want BucketOwnerEnforced", rules)
	}

	pol, err := c.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("GetBucketPolicy: %v", err)
	}
	var stored, applied struct {
		Version   string
		Statement []map[string]any
	}
	if err := json.Unmarshal([]byte(aws.ToString(pol.Policy)), &stored); err != nil {
		t.Fatalf("stored policy is not JSON: %v\n%s", err, aws.ToString(pol.Policy))
	}
	if err := json.Unmarshal([]byte(outputs.Policy.Value), &applied); err != nil {
		t.Fatalf("policy output is not JSON: %v\n%s", err, outputs.Policy.Value)
	}
	if !reflect.DeepEqual(stored, applied) {
		t.Errorf("stored policy differs from the one Terraform applied:\nstored:  %s\napplied: %s", aws.ToString(pol.Policy), outputs.Policy.Value)
	}
	if len(stored.Statement) != 1 || stored.Statement[0]["Sid"] != "DenyPlainHTTP" || stored.Statement[0]["Effect"] != "Deny" {
		t.Errorf("stored policy statements = %v, want only DenyPlainHTTP (no distribution: nobody allowed anything)", stored.Statement)
	}
}
