package redisx

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The Redis ACL users of a deployment: one per role, each allowed only the
// keys and commands its role's backends use (docs/operations.md, "Redis
// users"). This table is the one place the rules live: `danmaku
// redis-acl` prints them for a local Redis, infra/terraform/redis_acl.tf
// carries them as ElastiCache access strings (a test holds the two equal),
// and the stack's ACL test runs every role's real backends as its user.
//
// Key permissions use Redis 7's read-only (%R~) and write-only (%W~)
// patterns where a role only reads or only writes a key. A Lua script's
// keys (EVAL, EVALSHA) need both: Redis cannot tell how a script uses
// them, so a key a role touches through a script is granted whole (~).
// Commands are listed one by one after -@all: a category such as @write
// would also grant commands without keys (FLUSHALL, SWAPDB), which no key
// pattern limits.

// ACL roles: the four server roles, and ops for the operators' own tools
// (redis-cli: the rate-limit rules document, reads for diagnosis). The auth
// center runs inside the gslb (the process holding the master key), so
// the token keys are the gslb's to write; the load table is written by the
// nodes that report their load, edge and ingest.
const (
	ACLGSLB   = "gslb"
	ACLIngest = "ingest"
	ACLEdge   = "edge"
	ACLSlicer = "slicer"
	ACLOps    = "ops"
)

// ErrUnknownRole is returned for a role that has no ACL user.
var ErrUnknownRole = errors.New("redisx: no Redis ACL user for this role")

// ACLUser returns the name of role's ACL user, "danmaku-ROLE" (the
// -redis-user of the role's processes).
func ACLUser(role string) string { return "danmaku-" + role }

// ACLRoles returns every role with an ACL user, in a fixed order.
func ACLRoles() []string {
	return []string{ACLGSLB, ACLIngest, ACLEdge, ACLSlicer, ACLOps}
}

// The key patterns, from the key builders of each backend. Glob syntax:
// '*' matches any run of characters; '{' and '}' are plain characters.
const (
	// auth.RedisSecrets: the token public keys of each epoch. Writing one
	// would let its writer mint tokens every node accepts.
	keyTokens = Prefix + "{auth}:*"
	// event.RedisStore: every event and its rooms' settings.
	keyEvents = Prefix + "events"
	// ratelimit.RedisSource: the rules document (written by operators).
	keyRules = Prefix + "ratelimit:rules"
	// rules.RedisStore: the versioned word lists and rate-limit rules
	// (one hash per kind), pushed through the ingest's rules API and
	// followed by every node.
	keyRuleDocs = Prefix + "{rules}:*"
	// ratelimit.RedisWindow: the shared windows of the rate limits.
	keyWindows = Prefix + "{rl:*}:w"
	// loadtable.RedisTable: each shard's records and change log.
	keyLoad = Prefix + "{load:*}:*"
	// loadtable.RedisTable's online counts, per shard.
	keyOnline = Prefix + "{online:*}"
	// stream.RedisStore: the rooms registry, and each room's two lanes
	// (the site stream is the Live lane of room "*site").
	keyRooms   = Prefix + "rooms"
	keyBarrage = Prefix + "{room:*}:barrage"
	keyLive    = Prefix + "{room:*}:live"
	// ingest: a room's bucket, batch records, fast-lane counter, gift
	// order records and lotteries.
	keyBucket   = Prefix + "{room:*}:bucket"
	keyBatch    = Prefix + "{room:*}:batch:*"
	keyFastLane = Prefix + "{room:*}:fastlane"
	keyOrder    = Prefix + "{room:*}:order:*"
	// keyOrderTerms holds an order's gift terms beside its record, so that
	// a reused order id with another gift is answered 409.
	keyOrderTerms = Prefix + "{room:*}:orderterms:*"
	// keyOrderRoom holds the room an order id was first used in, under
	// the order's own hash tag, so that the id in another room is a 409.
	keyOrderRoom = Prefix + "{order:*}:room"
	keyLottery   = Prefix + "{room:*}:lottery:*"
	// keyReports covers a room's report queue, its items and reporters,
	// and the decisions about each sender (reports, report:*, reportsof:*).
	keyReports = Prefix + "{room:*}:report*"
	// keyTakedowns is a room's takedowns (ingest.RedisTakedownStore).
	keyTakedowns = Prefix + "{room:*}:takedowns"
	keyLotteries = Prefix + "{lotteries}:*"
	keyBans      = Prefix + "{bans}:*"
	keyGlobal    = Prefix + "{event:*}:global"
	// slicer.RedisBacklog (the ingest's gift script reads and bumps it),
	// slicer.RedisLease and slicer.RedisSettings.
	keyBacklog  = Prefix + "{room:*}:giftbacklog"
	keyLeader   = Prefix + "{room:*}:leader"
	keySettings = Prefix + "slicer:settings"
	// Everything of the project, for the operators' reads.
	keyAll = Prefix + "*"
)

// Key permission prefixes (Redis 7).
const (
	rw = "~"
	ro = "%R~"
	wo = "%W~"
)

// connCmds are what every client sends besides its role's own commands:
// PING (redisx.Connect's check), and what a Cluster client needs to find
// and follow the slots — CLUSTER SLOTS, COMMAND (go-redis reads which
// argument is the key from it) and ASKING (a slot in migration). HELLO and
// AUTH need no grant. CLIENT SETINFO is never sent (newClient turns it
// off): it does not exist before Redis 7.2 and could not be granted there.
var connCmds = []string{"ping", "cluster|slots", "command", "asking"}

// scriptCmds run the backends' Lua scripts: EVALSHA, and EVAL when the
// server has not cached the script (NOSCRIPT). The commands a script calls
// are checked one by one against the same rules.
var scriptCmds = []string{"evalsha", "eval"}

// roScriptCmds run a read-only script (EVALSHA_RO, Redis 7): its keys are
// checked as reads, so that a role with %R~ on them may run it (a plain
// EVAL's keys are checked as writes). The ban list's read is one.
var roScriptCmds = []string{"evalsha_ro", "eval_ro"}

// aclRule is one role's grant: key patterns with their permission, and
// commands.
type aclRule struct {
	keys    [][2]string // {permission prefix, pattern}
	scripts bool        // scriptCmds too
	cmds    []string
}

// acls is the table. Each role's keys say who writes what; each command
// is there because a backend of the role sends it (the backend is named).
var acls = map[string]aclRule{
	// The gslb signs tokens and runs the auth center (publishes the token
	// keys), serves the operators' event API, reads the load table every
	// 5 ms and prunes it (a script) with the online counts of pruned
	// nodes, counts its rate limits' shared windows (a script), follows
	// Redis's clock (TIME), reads the bans (a banned user's entry is
	// refused; list script: get, hgetall) and follows the rate-limit rules.
	ACLGSLB: {
		scripts: true,
		keys: [][2]string{
			{rw, keyTokens}, {rw, keyEvents}, {rw, keyLoad}, {wo, keyOnline},
			{rw, keyWindows}, {ro, keyRules}, {ro, keyBans}, {ro, keyRuleDocs},
		},
		cmds: concat(
			// auth
			[]string{"set", "mget"},
			// the rate-limit rules in force (rules.Follower: hget, hmget)
			[]string{"hmget"},
			// events (update script: hexists, hset)
			[]string{"hsetnx", "hexists", "hset", "hget", "hgetall", "hdel"},
			// load table (prune script: hget, hdel, xadd)
			[]string{"xrevrange", "xrange", "xadd"},
			// rate limits
			[]string{"zremrangebyscore", "zcard", "zadd", "pexpire", "zrange", "get"},
			// the store clock; scripts
			[]string{"time"},
			// bans (read-only list script)
			roScriptCmds,
		),
	},
	// The ingest verifies tokens; reports its load and reads the table and
	// the edges' online counts (room buckets follow them); appends to the
	// rooms' lanes and the site stream through its scripts (room gate, fast
	// lane, gift log with WAIT) and registers rooms; keeps bans, lotteries
	// and the event buckets; counts its rate limits; serves the rules API
	// (pushes the versioned documents) and follows them.
	ACLIngest: {
		scripts: true,
		keys: [][2]string{
			{ro, keyTokens}, {ro, keyEvents}, {rw, keyLoad}, {ro, keyOnline},
			{rw, keyRooms}, {rw, keyBarrage}, {rw, keyLive},
			{rw, keyBucket}, {rw, keyBatch}, {rw, keyFastLane}, {rw, keyOrder}, {rw, keyOrderTerms}, {rw, keyOrderRoom}, {rw, keyBacklog},
			{rw, keyLottery}, {rw, keyLotteries}, {rw, keyBans}, {rw, keyGlobal}, {rw, keyReports},
			{rw, keyWindows}, {ro, keyRules}, {rw, keyRuleDocs}, {rw, keyTakedowns},
		},
		cmds: concat(
			// auth, events
			[]string{"mget", "hgetall"},
			// load reports and reads
			[]string{"multi", "exec", "hset", "hdel", "xadd", "xrevrange", "xrange"},
			// site stream, room registry
			[]string{"xread", "xinfo|stream", "hsetnx", "time"},
			// gate, fast lane, gift log; the gift script counts its
			// master's online replicas (-gift-wait-replicas) with INFO's
			// replication section only
			[]string{"get", "set", "hmget", "pexpire", "wait", "info|replication"},
			// bans, lotteries
			[]string{"hget", "hscan", "incr", "zadd", "zrem", "zrangebyscore", "sadd", "scard", "sscan", "pexpireat"},
			// reports (the add and decide scripts, the review's reads)
			[]string{"zscore", "zcard", "zpopmin", "del", "sismember", "zincrby", "zrevrange", "exists", "lpush", "ltrim", "lrange", "pexpiretime"},
			roScriptCmds,
			// rate limits
			[]string{"zremrangebyscore", "zcard", "zrange"},
			// takedowns (add script: hget, hlen, hset, pexpiretime,
			// pexpireat; lookup, list)
			[]string{"hlen", "pexpiretime"},
			// the rules API (push script: hincrby, hset, hdel) and the
			// documents in force (hget, hmget)
			[]string{"hincrby"},
		),
	},
	// The edge verifies tokens, reports its load and its rooms' online
	// counts (write only: it reads neither), reads the rooms' Live lanes
	// and the site stream, counts its rate limits (and follows their
	// rules), and reads the bans (it closes and refuses banned users; list
	// script: get, hgetall).
	ACLEdge: {
		scripts: true,
		keys: [][2]string{
			{ro, keyTokens}, {ro, keyEvents}, {wo, keyLoad}, {wo, keyOnline},
			{ro, keyLive}, {rw, keyWindows}, {ro, keyRules}, {ro, keyBans}, {ro, keyRuleDocs},
		},
		cmds: concat(
			// auth, events
			[]string{"mget", "hgetall"},
			// load and online reports
			[]string{"multi", "exec", "hset", "hdel", "xadd"},
			// the lanes it serves
			[]string{"xread", "xrevrange", "xinfo|stream"},
			// rate limits
			[]string{"time", "zremrangebyscore", "zcard", "zadd", "pexpire", "zrange", "get"},
			// bans (read-only list script)
			roScriptCmds,
			// the rate-limit rules in force (rules.Follower)
			[]string{"hget", "hmget"},
		),
	},
	// The slicer reads the rooms' lanes and the site stream in consumer
	// groups and trims them, closes ended rooms, holds room leases,
	// publishes each room's gift backlog and keeps the budget settings.
	ACLSlicer: {
		scripts: true,
		keys: [][2]string{
			{ro, keyEvents}, {rw, keyRooms}, {rw, keyBarrage}, {rw, keyLive},
			{rw, keyLeader}, {rw, keyBacklog}, {rw, keySettings},
		},
		cmds: concat(
			// events, room registry
			[]string{"hgetall", "hdel"},
			// lanes (drain script: time, xreadgroup)
			[]string{"xreadgroup", "xgroup|create", "xgroup|destroy", "xautoclaim", "xack", "xpending", "xtrim", "del", "pexpire", "time"},
			// leases (scripts), backlog, settings
			[]string{"get", "set"},
		),
	},
	// The operators' user: writes the rate-limit rules document (the only
	// shared setting no role's API writes) and reads the rest for
	// diagnosis. No scripts; no SCAN or KEYS: they would list every key's
	// name, the project's or not.
	ACLOps: {
		keys: [][2]string{{rw, keyRules}, {ro, keyAll}},
		cmds: concat(
			[]string{"set", "get", "mget", "strlen", "exists", "type", "ttl", "pttl"},
			[]string{"hget", "hgetall", "hlen", "scard", "sscan", "zcard", "zrange"},
			[]string{"xlen", "xrange", "xrevrange", "xinfo|stream", "xinfo|groups", "xpending"},
		),
	},
}

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// ACL returns the rules of role's ACL user, in ACL SETUSER syntax and
// without its state or password: key patterns, then -@all and the
// commands it may run.
func ACL(role string) ([]string, error) {
	r, ok := acls[role]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRole, role)
	}
	out := make([]string, 0, len(r.keys)+1+len(connCmds)+len(scriptCmds)+len(r.cmds))
	for _, k := range r.keys {
		out = append(out, k[0]+k[1])
	}
	out = append(out, "-@all")
	seen := map[string]bool{}
	cmds := connCmds
	if r.scripts {
		cmds = concat(cmds, scriptCmds)
	}
	for _, c := range concat(cmds, r.cmds) {
		if !seen[c] {
			seen[c] = true
			out = append(out, "+"+c)
		}
	}
	return out, nil
}

// AccessString returns role's rules as an ElastiCache access string: "on"
// and the rules (ElastiCache sets passwords apart and refuses "reset").
func AccessString(role string) (string, error) {
	rules, err := ACL(role)
	if err != nil {
		return "", err
	}
	return "on " + strings.Join(rules, " "), nil
}

// ErrNoPassword is returned by SetUser for an empty password: a user
// without one would be either locked out or, with nopass, open to anyone.
var ErrNoPassword = errors.New("redisx: an ACL user needs a password")

// SetUser returns the ACL SETUSER command that creates or replaces role's
// user with password, as arguments: "reset" first, so that running it
// again drops whatever the user had, and the password as its SHA-256 (#),
// so that the command never carries it in the clear.
func SetUser(role, password string) ([]string, error) {
	if password == "" {
		return nil, fmt.Errorf("%w (%s)", ErrNoPassword, ACLUser(role))
	}
	rules, err := ACL(role)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(password))
	return append([]string{"ACL", "SETUSER", ACLUser(role), "reset", "on", "#" + hex.EncodeToString(sum[:])}, rules...), nil
}
