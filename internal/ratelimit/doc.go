// Package ratelimit is the request limiter in front of every public
// endpoint of the gslb and the ingest: rules by route and key (client IP,
// user, room, service credential, or the node as a whole), each either a
// local token bucket (internal/bucket; per node, exact on that node, no
// round trip) or a sliding window shared by the nodes (a Window: a sorted
// set in Redis, exact across nodes, for low rates). Rules come from a JSON
// document that a RuleSource (a watched file, a Redis key) reloads at run
// time; docs/api-limits.md describes the rules, the answers and the
// defaults.
//
// A request over a rule is answered 429 rate_limited with a jittered
// Retry-After. A request that passes but used most of a rule's budget is
// marked near the limit (Near), so that the handler can answer more
// cheaply (the gslb serves the client's last allocation). When the shared
// window fails, its rule falls back to a local bucket holding this node's
// share of the limit: the limiter never fails open and never answers 500.
//
// A Limiter is safe for concurrent use. New starts nothing; Run reloads the
// rules and forgets idle buckets until its context ends.
package ratelimit
