package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"danmaku/internal/breaker"
)

var _ Store = (*S3Store)(nil)

// ErrTooLarge is returned by the S3 store for an object bigger than its
// MaxObjectBytes: Get refuses to read it into memory, Put refuses to write
// what it could not read back.
var ErrTooLarge = errors.New("objstore: object too large")

// Defaults of S3Config.
const (
	defaultS3Region       = "us-east-1"
	defaultS3Timeout      = 5 * time.Second
	defaultS3MaxRetries   = 3
	defaultMaxObjectBytes = 16 << 20
	// defaultS3IdleConns is how many idle connections the default HTTP
	// client keeps to the server.
	defaultS3IdleConns = 128
)

// S3Config configures an S3Store. Only Bucket is required.
type S3Config struct {
	// Bucket is the bucket objects are written to. Required.
	Bucket string
	// Prefix, when set, is prepended to every key, so several rooms, events
	// or test runs can share a bucket. It names a folder: it must end with
	// "/" and be a valid key without that slash (see CheckKey). Default: no
	// prefix.
	Prefix string
	// Endpoint is the base URL of an S3-compatible server, such as
	// "http://127.0.0.1:7070". Default (empty): AWS S3, resolved from Region
	// (with the default credential chain, AWS_ENDPOINT_URL_S3 if set).
	Endpoint string
	// Region is the signing region. Default: "us-east-1".
	Region string
	// PathStyle addresses buckets as Endpoint/Bucket/key instead of
	// Bucket.Endpoint/key; most S3-compatible servers need it. Default: false
	// (virtual-hosted style, what AWS prefers).
	PathStyle bool
	// AccessKey and SecretKey are static credentials; set both or neither.
	// Default (both empty): the SDK's default credential chain (environment,
	// shared config files, web identity, container or instance role).
	AccessKey string
	SecretKey string
	// Timeout bounds each HTTP attempt, body included, so that a server that
	// accepts the connection and then stalls cannot hold a segment writer
	// past its second for long. Retries each get their own Timeout, within
	// CallTimeout. Default: 5 s.
	Timeout time.Duration
	// CallTimeout bounds one Put, Get, Delete or page of List, retries and
	// backoff included, unless the caller's context ends sooner: a segment
	// later than that is a failed write the slicer retries in order, not a
	// loop stuck on one request. Default: Timeout, so retries fit only
	// after fast failures (a refused connection, a 5xx), never after a
	// stall.
	CallTimeout time.Duration
	// Breaker tunes the circuit breaker of the store's endpoint and bucket
	// (Failures, SlowCall, OpenFor, Probes; Dep, Target and IsFailure are
	// set here). Zero fields: breaker's defaults. The breaker is the
	// process's, shared by every store of that endpoint and bucket: the
	// first store's settings hold. While it is open, every call (Put, Get,
	// Delete, each page of List) fails at once with an error that matches
	// breaker.ErrOpen (docs/reliability.md). A failure is a connection
	// error, a timeout, a 5xx or a throttling answer; not found, a failed
	// condition or a refused request are answers.
	Breaker breaker.Config
	// MaxRetries is how many times a failed attempt (connection error,
	// throttling, 5xx) is retried, with the SDK's exponential backoff with
	// jitter. Default (0): 3. Negative: no retries.
	MaxRetries int
	// MaxObjectBytes is the largest object Get reads into memory and Put
	// writes; a bigger one fails with ErrTooLarge. Segments are a few KB, so
	// anything near the limit is a bug or a foreign object. Default: 16 MiB.
	MaxObjectBytes int64
	// HTTPClient, when set, sends the requests (for a custom transport, proxy
	// or TLS configuration). It is copied and the copy's Timeout set to
	// Timeout. Default: the SDK's default client, keeping up to 128 idle
	// connections to the server.
	HTTPClient *http.Client
}

// S3Store is a Store on AWS S3 or an S3-compatible server (versitygw, MinIO,
// Ceph), through aws-sdk-go-v2. It is safe for concurrent use; it starts no
// goroutines and holds nothing but idle HTTP connections, so it needs no
// Close.
//
// Conditional puts use S3's own If-None-Match and If-Match, so the check and
// the write are one atomic step on the server. A retried conditional put
// whose first attempt did succeed (the response was lost) fails with
// ErrPrecondition against its own write; callers already treat
// ErrPrecondition by reading the object back, which then shows what they
// wrote.
type S3Store struct {
	client   *s3.Client
	bucket   string
	prefix   string
	maxBytes int64
	call     time.Duration
	breaker  *breaker.Breaker
}

// NewS3Store checks cfg, applies its defaults and returns a store. It talks
// to no server: a wrong bucket or credentials show up on the first call. ctx
// bounds only the loading of the default credential chain's configuration.
func NewS3Store(ctx context.Context, cfg S3Config) (*S3Store, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	hc := s3HTTPClient(cfg)

	var awsCfg aws.Config
	if cfg.AccessKey != "" {
		// Static credentials: nothing is read from the environment or
		// ~/.aws, so a developer's AWS profile cannot redirect a test or a
		// local stack.
		awsCfg = aws.Config{
			Region:      cfg.Region,
			Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, ""),
		}
	} else {
		var err error
		awsCfg, err = config.LoadDefaultConfig(ctx, config.WithRegion(cfg.Region))
		if err != nil {
			return nil, fmt.Errorf("objstore: s3: load AWS config: %w", err)
		}
	}
	bc := cfg.Breaker
	bc.Dep, bc.Target, bc.IsFailure = "s3", s3Target(cfg), isS3Failure
	br, err := breaker.For(bc)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3: %w", err)
	}
	attempts := cfg.MaxRetries + 1
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.HTTPClient = hc
		o.UsePathStyle = cfg.PathStyle
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		// The SDK's retryer, not a loop of ours: it backs off with jitter
		// from 50 ms and keeps a retry budget per client, so an outage does
		// not turn every write into MaxRetries+1 requests.
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxAttempts = attempts })
		// Also overrides AWS_MAX_ATTEMPTS, which the default chain copies
		// here and the SDK would wrap around the retryer.
		o.RetryMaxAttempts = attempts
		// The SDK's default trailing CRC checksums are not supported alike
		// by S3-compatible servers; send and check checksums only where the
		// API requires them.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &S3Store{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix, maxBytes: cfg.MaxObjectBytes, call: cfg.CallTimeout, breaker: br}, nil
}

// s3Target names what a store's breaker guards: its endpoint (or AWS's
// region) and bucket.
func s3Target(cfg S3Config) string {
	where := cfg.Endpoint
	if where == "" {
		where = "aws:" + cfg.Region
	}
	return where + "/" + cfg.Bucket
}

// isS3Failure reports whether err says the server is unreachable, too slow
// or failing (a connection error, a timeout, a 5xx, throttling), as opposed
// to an answer about the request (not found, a failed condition, access
// denied), which says the server works.
func isS3Failure(err error) bool {
	if errors.Is(err, breaker.ErrOpen) {
		return false
	}
	code, status := apiError(err)
	switch {
	case status >= 500, status == http.StatusTooManyRequests, code == "SlowDown", code == "RequestTimeout":
		return true
	case status != 0 || code != "":
		return false
	}
	return true
}

// guard runs one call of the store through its breaker, bounded by
// CallTimeout. A refused call returns an error matching breaker.ErrOpen
// and sends nothing.
func (s *S3Store) guard(ctx context.Context, call func(ctx context.Context) error) error {
	done, err := s.breaker.Allow()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.call)
	defer cancel()
	start := time.Now()
	err = call(ctx)
	done(err, time.Since(start))
	return err
}

// Put implements Store.
func (s *S3Store) Put(ctx context.Context, key string, body []byte, opts PutOptions) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", fmt.Errorf("objstore: s3 put %q: %w", key, err)
	}
	if int64(len(body)) > s.maxBytes {
		return "", fmt.Errorf("objstore: s3 put %s: %w: %d bytes, limit %d", key, ErrTooLarge, len(body), s.maxBytes)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.prefix + key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   nonEmpty(opts.ContentType),
		CacheControl:  nonEmpty(opts.CacheControl),
		IfMatch:       nonEmpty(opts.IfMatch),
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	var out *s3.PutObjectOutput
	err := s.guard(ctx, func(ctx context.Context) (err error) {
		out, err = s.client.PutObject(ctx, in)
		return err
	})
	if err != nil {
		if isPreconditionFailed(err, opts.IfMatch != "") {
			return "", fmt.Errorf("objstore: s3 put %s: %w", key, ErrPrecondition)
		}
		return "", fmt.Errorf("objstore: s3 put %s: %w", key, err)
	}
	return aws.ToString(out.ETag), nil
}

// Get implements Store.
func (s *S3Store) Get(ctx context.Context, key string) (*Object, error) {
	if err := CheckKey(key); err != nil {
		return nil, fmt.Errorf("objstore: s3 get %q: %w", key, err)
	}
	var (
		obj     *Object
		bodyErr error // not the server's fault: the store's own limit
	)
	err := s.guard(ctx, func(ctx context.Context) error {
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
			Bucket: aws.String(s.bucket),
			Key:    aws.String(s.prefix + key),
		})
		if err != nil {
			return err
		}
		obj, bodyErr, err = s.readBody(key, out)
		return err
	})
	if bodyErr != nil {
		return nil, bodyErr
	}
	if err != nil {
		code, status := apiError(err)
		switch {
		case code == "NoSuchBucket":
			// A missing bucket is a configuration error, not a second that
			// is not written yet.
			return nil, fmt.Errorf("objstore: s3 get %s: %w", key, err)
		case code == "NoSuchKey" || status == http.StatusNotFound:
			return nil, fmt.Errorf("objstore: s3 get %s: %w", key, ErrNotFound)
		case status == http.StatusForbidden:
			// S3 answers 403 AccessDenied instead of 404 for a missing key
			// when the caller may not list the bucket, so as not to reveal
			// which keys exist. The slicer's credentials are granted
			// s3:ListBucket on its bucket, so for them a missing key is 404,
			// and a 403 means wrong credentials or policy. Calling it
			// ErrNotFound would make the slicer treat a broken setup as "no
			// segment yet" (and a failover as "nothing written") and carry
			// on; an error makes it stop and say so.
			return nil, fmt.Errorf("objstore: s3 get %s: access denied (a missing key reads as 403 only without s3:ListBucket): %w", key, err)
		}
		return nil, fmt.Errorf("objstore: s3 get %s: %w", key, err)
	}
	return obj, nil
}

// readBody reads a Get's body within the store's limit. tooLarge is an
// object over the limit (the request went well); err is a failed read
// (the connection broke or stalled).
func (s *S3Store) readBody(key string, out *s3.GetObjectOutput) (obj *Object, tooLarge, err error) {
	defer out.Body.Close()
	if n := aws.ToInt64(out.ContentLength); n > s.maxBytes {
		return nil, fmt.Errorf("objstore: s3 get %s: %w: %d bytes, limit %d", key, ErrTooLarge, n, s.maxBytes), nil
	}
	// Read one byte past the limit so that a body longer than its
	// Content-Length said (or one sent without it) is caught too.
	b, err := io.ReadAll(io.LimitReader(out.Body, s.maxBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > s.maxBytes {
		return nil, fmt.Errorf("objstore: s3 get %s: %w: over %d bytes", key, ErrTooLarge, s.maxBytes), nil
	}
	return &Object{
		Body:         b,
		ContentType:  aws.ToString(out.ContentType),
		CacheControl: aws.ToString(out.CacheControl),
		ETag:         aws.ToString(out.ETag),
	}, nil, nil
}

// isPreconditionFailed reports whether a conditional put was refused: 412
// PreconditionFailed (the object exists, or its ETag differs); 409
// ConditionalRequestConflict, which S3 answers to the losers of concurrent
// conditional writes to one key while the winner's write is in flight; and,
// for an If-Match put, 404 NoSuchKey, which S3 answers when there is no
// object to match (a missing object does not have the ETag either, so the
// manifest writer hears "moved on" and re-reads, as the other stores say).
func isPreconditionFailed(err error, ifMatch bool) bool {
	code, status := apiError(err)
	switch {
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return true
	case status == http.StatusConflict && code == "ConditionalRequestConflict":
		return true
	case ifMatch && code != "NoSuchBucket" && (code == "NoSuchKey" || status == http.StatusNotFound):
		return true
	}
	return false
}

// apiError returns the S3 error code and HTTP status of err, each empty or
// zero when err carries none (a connection error, a canceled context).
func apiError(err error) (code string, status int) {
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		code = ae.ErrorCode()
	}
	if re, ok := errors.AsType[interface {
		error
		HTTPStatusCode() int
	}](err); ok {
		status = re.HTTPStatusCode()
	}
	return code, status
}

// nonEmpty returns nil for "", so that an unset option sends no header.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// withDefaults checks c and fills its zero fields.
func (c *S3Config) withDefaults() error {
	if c.Bucket == "" {
		return errors.New("objstore: s3: Bucket is required")
	}
	if c.Prefix != "" {
		if !strings.HasSuffix(c.Prefix, "/") || CheckKey(strings.TrimSuffix(c.Prefix, "/")) != nil {
			return fmt.Errorf("objstore: s3: Prefix %q must be a valid key followed by \"/\"", c.Prefix)
		}
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("objstore: s3: Endpoint %q is not an http(s) URL", c.Endpoint)
		}
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("objstore: s3: set both AccessKey and SecretKey, or neither")
	}
	if c.Timeout < 0 || c.CallTimeout < 0 {
		return fmt.Errorf("objstore: s3: negative Timeout %v or CallTimeout %v", c.Timeout, c.CallTimeout)
	}
	if c.MaxObjectBytes < 0 {
		return fmt.Errorf("objstore: s3: negative MaxObjectBytes %d", c.MaxObjectBytes)
	}
	if c.Region == "" {
		c.Region = defaultS3Region
	}
	if c.Timeout == 0 {
		c.Timeout = defaultS3Timeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.Timeout
	}
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = defaultS3MaxRetries
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.MaxObjectBytes == 0 {
		c.MaxObjectBytes = defaultMaxObjectBytes
	}
	return nil
}

// s3HTTPClient is the HTTP client of cfg's store: cfg.HTTPClient, or the
// SDK's, with cfg.Timeout.
func s3HTTPClient(cfg S3Config) aws.HTTPClient {
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		c.Timeout = cfg.Timeout
		return &c
	}
	return awshttp.NewBuildableClient().WithTimeout(cfg.Timeout).WithTransportOptions(func(tr *http.Transport) {
		// Every room's segment is written on the same second boundary:
		// bursts of concurrent PUTs to one host. The SDK keeps 10 idle
		// connections per host and would redo TCP and TLS handshakes
		// for the rest every second.
		tr.MaxIdleConns = defaultS3IdleConns
		tr.MaxIdleConnsPerHost = defaultS3IdleConns
	})
}
