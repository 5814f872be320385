package ratelimit

// DefaultRules are the rules of a deployment that names none:
// docs/api-limits.md gives each one's reason. Per-IP rules are local and
// generous, because thousands of viewers can share one carrier-grade NAT
// address; the shared windows are the low rates that must hold exactly
// across nodes: a user's entries and the service credentials. Loopback
// callers are internal (a probe, a sidecar, `danmaku dev` and its load
// generator) and are not limited.
func DefaultRules() Rules {
	return Rules{Rules: []Rule{
		{Name: "entry-ip", Route: "GET /v1/entry", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 500, Per: "1s", Burst: 3000},
		{Name: "entry-node", Route: "GET /v1/entry", Key: KeyGlobal, Algorithm: AlgorithmLocal, Limit: 20000, Per: "1s", Burst: 40000},
		{Name: "entry-user", Route: "GET /v1/entry", Key: KeyUser, Algorithm: AlgorithmWindow, Limit: 30, Per: "1m"},
		{Name: "time-ip", Route: "GET /v1/time", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 500, Per: "1s", Burst: 3000},
		{Name: "ws-ip", Route: "GET /v1/ws", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 1000, Per: "1s", Burst: 5000},
		{Name: "upload-ip", Route: "POST /v1/rooms/*", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 2000, Per: "1s", Burst: 6000},
		{Name: "gift-credential", Route: "POST /v1/gifts", Key: KeyCredential, Algorithm: AlgorithmWindow, Limit: 5000, Per: "1s"},
		{Name: "admin-credential", Route: "/v1/admin/*", Key: KeyCredential, Algorithm: AlgorithmWindow, Limit: 50, Per: "1s"},
		{Name: "admin-ip", Route: "/v1/admin/*", Key: KeyIP, Algorithm: AlgorithmLocal, Limit: 20, Per: "1s", Burst: 100},
	}, Allow: Allow{CIDRs: []string{"127.0.0.0/8", "::1/128"}}}
}
