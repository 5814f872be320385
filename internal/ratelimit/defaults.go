package ratelimit

import "runtime"

// Machine is what the built-in rules are sized for.
type Machine struct {
	// Cores is the node's core count: the per-node rules (a "global" key
	// on a local bucket: what the whole node answers) grow with it. Zero:
	// runtime.NumCPU(), the cores this process may run on.
	Cores int
	// Dev is `danmaku dev`: loopback is allowlisted there (the demo page,
	// the load generator beside it on one machine). False: no address is
	// allowlisted; an operator who wants a probe or a sidecar exempt lists
	// it in a rules document (allow.cidrs).
	Dev bool
}

// The per-core figures of the per-node rules. A gslb core answers about
// 10,000 entries a second (20,090/s measured on 2 cores with Ed25519
// tokens, docs/benchmarks.md "GSLB and tokens"): beyond that a cheap 429
// serves the client better than a late 200. The burst is two seconds of
// it, so that a show's first second passes whole.
const (
	EntryNodePerCore      = 10_000
	EntryNodeBurstPerCore = 20_000
)

// devAllow is the allowlist of `danmaku dev`: loopback.
var devAllow = []string{"127.0.0.0/8", "::1/128"}

// DefaultRules are the rules of a deployment that names none, for machine
// m: docs/api-limits.md gives each one's reason. Per-IP rules are local
// and generous, because thousands of viewers can share one carrier-grade
// NAT address (they count clients, so they do not grow with the machine);
// per-node rules scale with m's cores; the shared windows are the low
// rates that must hold exactly across nodes: a user's entries and the
// service credentials.
//
// Outside dev nothing is allowlisted: a caller on loopback is a caller
// like any other, so that a proxy on the machine (which makes every
// client loopback) limits nobody by accident — it is counted as the one
// address it is, unless -trusted-proxies lists it.
func DefaultRules(m Machine) Rules {
	cores := int64(m.Cores)
	if cores <= 0 {
		cores = int64(max(1, runtime.NumCPU()))
	}
	r := Rules{Rules: []Rule{
		{Name: "entry-ip", Route: "GET /v1/entry", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 500, Per: "1s", Burst: 3000},
		{Name: "entry-node", Route: "GET /v1/entry", Key: KeyGlobal, Algorithm: AlgorithmLocal, Limit: EntryNodePerCore * cores, Per: "1s", Burst: EntryNodeBurstPerCore * cores},
		{Name: "entry-user", Route: "GET /v1/entry", Key: KeyUser, Algorithm: AlgorithmWindow, Limit: 30, Per: "1m"},
		{Name: "time-ip", Route: "GET /v1/time", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 500, Per: "1s", Burst: 3000},
		{Name: "ws-ip", Route: "GET /v1/ws", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 1000, Per: "1s", Burst: 5000},
		{Name: "upload-ip", Route: "POST /v1/rooms/*", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 2000, Per: "1s", Burst: 6000},
		{Name: "gift-credential", Route: "POST /v1/gifts", Key: KeyCredential, Algorithm: AlgorithmWindow, Limit: 5000, Per: "1s"},
		{Name: "admin-credential", Route: "/v1/admin/*", Key: KeyCredential, Algorithm: AlgorithmWindow, Limit: 50, Per: "1s"},
		{Name: "admin-ip", Route: "/v1/admin/*", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 20, Per: "1s", Burst: 100},
	}}
	if m.Dev {
		r.Allow.CIDRs = append([]string(nil), devAllow...)
	}
	return r
}
