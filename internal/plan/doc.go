// Package plan turns a show's description (an event document) and the
// per-node figures measured on an instance type (a profile, written by
// `danmaku calibrate`) into a deployment: node counts per role, CDN, S3 and
// Redis rates, load-balancer and quota needs, the plan's service levels,
// and the .tfvars of infra/terraform's sizing variables.
//
// Every figure of a plan carries the formula it came from and the profile
// or event fields it read, so that a reader can redo the arithmetic; each
// role names the constraint that bound its count. Both documents are
// decoded strictly (internal/strictjson) and checked field by field: a bad
// document is an *Error naming the field, never a silent default.
//
// Everything here is pure arithmetic on values: safe for concurrent use,
// no I/O but the io.Writer a caller hands in.
package plan
