package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/ingest"
	"danmaku/internal/event"
	"danmaku/internal/loadtable"
	"danmaku/internal/ratelimit"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/rules"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
	"danmaku/slicer"
)

// aclRedis is a Redis (one server or a cluster) whose ACL users were
// created from redisx's table, each with aclPassword(role).
type aclRedis struct {
	url     string
	cluster bool
	// nodes are every server, each as a command function of its default
	// user (the administrator): ACL SETUSER and ACL LOG are per server.
	nodes []func(args ...string) (any, error)
}

func aclPassword(role string) string { return "acl-test-password-" + role }

// aclServer starts one redis-server and creates the users on it.
func aclServer(t *testing.T) *aclRedis {
	addr := testenv.Redis(t)
	admin := redistest.Dial(t, redisx.Config{URL: addr})
	r := &aclRedis{url: addr, nodes: []func(args ...string) (any, error){
		func(args ...string) (any, error) {
			a := make([]any, len(args))
			for i, s := range args {
				a[i] = s
			}
			return admin.Do(context.Background(), a...).Result()
		},
	}}
	r.createUsers(t)
	return r
}

// aclCluster starts a Redis Cluster and creates the users on every node
// (replicas too: one may be promoted).
func aclCluster(t *testing.T) *aclRedis {
	c := testenv.RedisCluster(t)
	r := &aclRedis{url: c.URL(), cluster: true}
	for _, n := range c.Nodes() {
		r.nodes = append(r.nodes, n.Do)
	}
	r.createUsers(t)
	return r
}

func (r *aclRedis) createUsers(t *testing.T) {
	t.Helper()
	for _, role := range redisx.ACLRoles() {
		args, err := redisx.SetUser(role, aclPassword(role))
		if err != nil {
			t.Fatal(err)
		}
		for _, do := range r.nodes {
			if _, err := do(args...); err != nil {
				t.Fatalf("%s: %v", strings.Join(args[:3], " "), err)
			}
		}
	}
}

// dial connects as role's user.
func (r *aclRedis) dial(t *testing.T, role string) redis.UniversalClient {
	t.Helper()
	return redistest.Dial(t, redisx.Config{URL: r.url, Username: redisx.ACLUser(role), Password: aclPassword(role)})
}

// aclLog returns every server's ACL log (the refusals since the servers
// started), one line per entry.
func (r *aclRedis) aclLog(t *testing.T) []string {
	t.Helper()
	var out []string
	for i, do := range r.nodes {
		v, err := do("ACL", "LOG")
		if err != nil {
			t.Fatalf("ACL LOG: %v", err)
		}
		entries, _ := v.([]any)
		for _, e := range entries {
			out = append(out, fmt.Sprintf("node %d: %v", i, e))
		}
	}
	return out
}

// aclStep is one thing a role does in Redis, through its real backend.
type aclStep struct {
	role, what string
	do         func(ctx context.Context, rdb redis.UniversalClient) error
}

// TestRedisACL creates every role's ACL user (redisx.SetUser) on a real
// Redis, runs each role's backends as that user — every operation the
// role performs, each through the backend the role uses — and checks that
// all of them work and that the server refused nothing meanwhile (its ACL
// log is empty: no role needs a command or key its user lacks); then that
// the writes a role must not make are refused with NOPERM. Once on one
// server, once on a Redis Cluster (whose clients also need CLUSTER SLOTS,
// COMMAND and, for the gift log's WAIT, replicas).
func TestRedisACL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis servers")
	}
	for _, k := range []struct {
		name  string
		start func(t *testing.T) *aclRedis
	}{{"redis", aclServer}, {"redis-cluster", aclCluster}} {
		t.Run(k.name, func(t *testing.T) {
			r := k.start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			clients := map[string]redis.UniversalClient{}
			for _, role := range redisx.ACLRoles() {
				clients[role] = r.dial(t, role)
			}
			for _, s := range aclSteps(t, clients, r.cluster) {
				if err := s.do(ctx, clients[s.role]); err != nil {
					t.Fatalf("%s as %s: %v", s.what, redisx.ACLUser(s.role), err)
				}
			}
			if refused := r.aclLog(t); len(refused) > 0 {
				t.Fatalf("the roles' own work was refused %d times:\n%s", len(refused), strings.Join(refused, "\n"))
			}
			for _, f := range aclForbidden() {
				rdb := clients[f.role]
				args := make([]any, len(f.args))
				for i, a := range f.args {
					args[i] = a
				}
				err := rdb.Do(ctx, args...).Err()
				if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
					t.Errorf("%s: %s answered %v, want NOPERM", redisx.ACLUser(f.role), strings.Join(f.args, " "), err)
				}
			}
			if len(r.aclLog(t)) == 0 {
				t.Fatal("the refusals left no entry in the ACL log: the check above would miss one")
			}
		})
	}
}

// aclForbiddenCmd is a command a role's user must be refused.
type aclForbiddenCmd struct {
	role string
	args []string
}

// aclForbidden lists, per role, writes it must not make — by key (the
// command itself it may run) or by command — and the administrative
// commands no role runs. Written out here rather than derived from the
// table: it is what the table must hold.
func aclForbidden() []aclForbiddenCmd {
	tokenKey := redisx.Prefix + "{auth}:epoch:1"
	live := redisx.RoomKey("aclroom", "live")
	var out []aclForbiddenCmd
	add := func(roles []string, args ...string) {
		for _, r := range roles {
			out = append(out, aclForbiddenCmd{r, args})
		}
	}
	all := redisx.ACLRoles()
	notGSLB := []string{redisx.ACLIngest, redisx.ACLEdge, redisx.ACLSlicer, redisx.ACLOps}
	// Token keys: the auth center's (the gslb's) alone.
	add(notGSLB, "SET", tokenKey, "forged")
	add(notGSLB, "EVAL", "return redis.call('SET', KEYS[1], 'forged')", "1", tokenKey)
	add(notGSLB, "DEL", tokenKey)
	// Rate-limit rules: the operators'.
	add([]string{redisx.ACLGSLB, redisx.ACLIngest, redisx.ACLEdge, redisx.ACLSlicer}, "SET", ratelimit.RulesKey, "{}")
	// Events: the gslb's event API.
	add(notGSLB, "HSET", event.EventsKey, "ev", "{}")
	add(notGSLB, "HDEL", event.EventsKey, "ev")
	// Bans and lotteries: the ingest's operator APIs.
	for _, k := range []string{ingest.BansKey, ingest.LotteriesRunningKey} {
		add([]string{redisx.ACLGSLB, redisx.ACLEdge, redisx.ACLSlicer, redisx.ACLOps}, "HSET", k, "u/", "{}")
	}
	add([]string{redisx.ACLGSLB, redisx.ACLEdge, redisx.ACLSlicer, redisx.ACLOps}, "INCR", ingest.BansVersionKey)
	// The rooms' lanes: the ingest appends, the slicer trims; the edge
	// and the gslb only read or not at all.
	add([]string{redisx.ACLGSLB, redisx.ACLEdge, redisx.ACLSlicer, redisx.ACLOps}, "XADD", live, "*", "m", "x")
	add([]string{redisx.ACLEdge, redisx.ACLOps}, "XTRIM", live, "MAXLEN", "0")
	// Slicer leases and settings: the slicer's.
	add([]string{redisx.ACLGSLB, redisx.ACLIngest, redisx.ACLEdge, redisx.ACLOps}, "SET", redisx.RoomKey("aclroom", "leader"), "me")
	add([]string{redisx.ACLGSLB, redisx.ACLIngest, redisx.ACLEdge, redisx.ACLOps}, "SET", redisx.Prefix+"slicer:settings", "{}")
	// The load table: the edge writes its own report and cannot read
	// anyone's; the slicer and the operators cannot write it.
	add([]string{redisx.ACLEdge}, "HGETALL", redisx.Prefix+"{load:0}:nodes")
	add([]string{redisx.ACLSlicer, redisx.ACLOps}, "HSET", redisx.Prefix+"{load:0}:nodes", "n", "x")
	// Keys outside the project, and what no role may run.
	add(all, "GET", "other:key")
	add(all, "FLUSHALL")
	add(all, "KEYS", "*")
	add(all, "CONFIG", "GET", "maxmemory")
	add(all, "ACL", "LIST")
	add(all, "SCRIPT", "FLUSH")
	add(all, "CLIENT", "KILL", "ID", "1")
	// The operators read and write keys one by one: no scripts.
	add([]string{redisx.ACLOps}, "EVAL", "return 1", "0")
	return out
}

// aclSteps is every role's work in Redis, in an order that gives each
// step what it reads (the ingest appends before the slicer and the edge
// read; the nodes report before the gslb prunes).
func aclSteps(t *testing.T, clients map[string]redis.UniversalClient, cluster bool) []aclStep {
	t.Helper()
	const room, ev = "aclroom", "aclev"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	streams := map[string]*stream.RedisStore{}
	for role, c := range clients {
		s, err := stream.NewRedisStore(stream.RedisConfig{Client: c, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		streams[role] = s
	}
	waitReplicas := 0
	if cluster {
		waitReplicas = 1 // as Terraform sets it: WAIT after every gift
	}
	gate, err := ingest.NewRedisRoomGate(ingest.RedisRoomGateConfig{Client: clients[redisx.ACLIngest], Streams: streams[redisx.ACLIngest], Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := ingest.NewRedisFastLane(ingest.RedisFastLaneConfig{Client: clients[redisx.ACLIngest], Streams: streams[redisx.ACLIngest], Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	gifts, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: clients[redisx.ACLIngest], Streams: streams[redisx.ACLIngest], WaitReplicas: waitReplicas, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	liveKey := stream.Key{Room: room, Lane: stream.Live}
	barrageKey := stream.Key{Room: room, Lane: stream.Barrage}
	limitsDoc, err := json.Marshal(ratelimit.Rules{Rules: []ratelimit.Rule{{Name: "acl", Route: "GET /v1/entry", Key: ratelimit.KeyIP, Algorithm: ratelimit.AlgorithmWindow, Limit: 100, Per: "1m"}}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		loadCursor []string
		lastLive   string
	)
	step := func(role, what string, do func(ctx context.Context, rdb redis.UniversalClient) error) aclStep {
		return aclStep{role, what, do}
	}
	load := func(rdb redis.UniversalClient) *loadtable.RedisTable { return loadtable.NewRedisTable(rdb) }
	report := func(id string, kind loadtable.NodeKind) func(ctx context.Context, rdb redis.UniversalClient) error {
		return func(ctx context.Context, rdb redis.UniversalClient) error {
			return load(rdb).Report(ctx, loadtable.NodeLoad{ID: id, Kind: kind, Addr: "http://" + id, At: now.Add(-time.Hour)})
		}
	}
	// Every role reads what every verifier and every event follower reads.
	readers := func(role string, tokens bool) []aclStep {
		out := []aclStep{step(role, "events: list", func(ctx context.Context, rdb redis.UniversalClient) error {
			events, err := event.NewRedisStore(rdb).List(ctx)
			if err == nil && len(events) == 0 {
				err = errors.New("no event")
			}
			return err
		})}
		if tokens {
			out = append(out, step(role, "token keys: fetch", func(ctx context.Context, rdb redis.UniversalClient) error {
				got, err := auth.NewRedisSecrets(rdb).Fetch(ctx, 1, 2)
				if err == nil && len(got) != 1 {
					err = fmt.Errorf("fetched %d token keys, want 1", len(got))
				}
				return err
			}))
		}
		return out
	}
	limits := func(role string) []aclStep {
		return []aclStep{
			step(role, "rate limits: rules", func(ctx context.Context, rdb redis.UniversalClient) error {
				_, err := ratelimit.NewRedisSource(rdb).Load(ctx)
				return err
			}),
			step(role, "rate limits: the version in force", func(ctx context.Context, rdb redis.UniversalClient) error {
				_, err := rules.NewLimitSource(rules.NewRedisStore(rdb)).Load(ctx)
				return err
			}),
			step(role, "rate limits: window", func(ctx context.Context, rdb redis.UniversalClient) error {
				_, err := ratelimit.NewRedisWindow(rdb).Take(ctx, "acl:"+role, 10, time.Minute)
				return err
			}),
		}
	}

	var steps []aclStep
	// The operators write the rate-limit rules and read for diagnosis.
	steps = append(steps,
		step(redisx.ACLOps, "rate limits: put rules", func(ctx context.Context, rdb redis.UniversalClient) error {
			return ratelimit.NewRedisSource(rdb).Put(ctx, limitsDoc)
		}),
	)
	// The ingest's rules API pushes versions, and reads them back.
	steps = append(steps,
		step(redisx.ACLIngest, "rules: push, history, get", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := rules.NewRedisStore(rdb)
			for _, kind := range []string{rules.KindLimits, rules.KindWords} {
				if _, err := s.Push(ctx, kind, limitsDoc, rules.Meta{By: "acl"}); err != nil {
					return err
				}
				if _, err := s.History(ctx, kind, 5); err != nil {
					return err
				}
			}
			_, err := s.Get(ctx, rules.KindWords, 0)
			return err
		}),
	)
	// The gslb: the auth center publishes, the event API writes.
	steps = append(steps,
		step(redisx.ACLGSLB, "auth center: publish", func(ctx context.Context, rdb redis.UniversalClient) error {
			return auth.NewRedisSecrets(rdb).Publish(ctx, 1, []byte("public key"), time.Hour)
		}),
		step(redisx.ACLGSLB, "events: create, update, get, delete", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := event.NewRedisStore(rdb)
			e := liveEvent(room)
			e.ID = ev
			for _, id := range []string{ev, "gone"} {
				e.ID = id
				if err := s.Create(ctx, e); err != nil {
					return err
				}
			}
			e.ID, e.Title = ev, "renamed"
			if err := s.Update(ctx, e); err != nil {
				return err
			}
			if _, err := s.Get(ctx, ev); err != nil {
				return err
			}
			return s.Delete(ctx, "gone")
		}),
		step(redisx.ACLGSLB, "store clock", func(ctx context.Context, rdb redis.UniversalClient) error {
			_, err := streams[redisx.ACLGSLB].Now(ctx)
			return err
		}),
	)
	steps = append(steps, readers(redisx.ACLGSLB, true)...)
	steps = append(steps, limits(redisx.ACLGSLB)...)

	// The ingest.
	steps = append(steps, readers(redisx.ACLIngest, true)...)
	steps = append(steps, limits(redisx.ACLIngest)...)
	steps = append(steps,
		step(redisx.ACLIngest, "load: report, read, remove", func(ctx context.Context, rdb redis.UniversalClient) error {
			if err := report("ingest-1", loadtable.KindIngest)(ctx, rdb); err != nil {
				return err
			}
			if err := report("ingest-2", loadtable.KindIngest)(ctx, rdb); err != nil {
				return err
			}
			_, cur, err := load(rdb).Changes(ctx, nil)
			if err != nil {
				return err
			}
			if _, _, err := load(rdb).Changes(ctx, cur); err != nil {
				return err
			}
			if _, err := load(rdb).Snapshot(ctx); err != nil {
				return err
			}
			return load(rdb).Remove(ctx, "ingest-2")
		}),
		step(redisx.ACLIngest, "room gate: flush a batch", func(ctx context.Context, rdb redis.UniversalClient) error {
			res, err := gate.Flush(ctx, room, ingest.Batch{ID: "b1", Msgs: []wire.Message{{Kind: wire.KindBarrage, User: "u", Text: "hi"}}, Capacity: 10, PerSec: 10})
			if err == nil && res.Granted != 1 {
				err = fmt.Errorf("granted %d", res.Granted)
			}
			return err
		}),
		step(redisx.ACLIngest, "fast lane: show an announcement", func(ctx context.Context, rdb redis.UniversalClient) error {
			_, err := fast.Show(ctx, room, stream.Live, wire.Message{Kind: wire.KindSystem, Text: "news", Role: "host"}, 5)
			return err
		}),
		step(redisx.ACLIngest, "gift log: append a gift (twice)", func(ctx context.Context, rdb redis.UniversalClient) error {
			g := wire.Message{Kind: wire.KindGift, User: "bob", Gift: "rocket", Value: 5000, Count: 1}
			for range 2 {
				if _, _, err := gifts.AppendGift(ctx, room, "order-1", g); err != nil {
					return err
				}
			}
			return nil
		}),
		step(redisx.ACLIngest, "site stream: broadcast, list", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := streams[redisx.ACLIngest]
			if _, err := s.Append(ctx, stream.SiteKey, []wire.Message{{Kind: wire.KindSystem, Text: "site", Site: true}}); err != nil {
				return err
			}
			if _, err := s.LastID(ctx, stream.SiteKey); err != nil {
				return err
			}
			_, err := s.Read(ctx, stream.SiteKey, "0", 10, 0)
			return err
		}),
		step(redisx.ACLIngest, "rooms: open", func(ctx context.Context, rdb redis.UniversalClient) error {
			return streams[redisx.ACLIngest].OpenRoom(ctx, room)
		}),
		step(redisx.ACLIngest, "takedowns: add twice, look up, list", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := ingest.NewRedisTakedownStore(rdb)
			td := ingest.Takedown{ID: "1-0", Kind: wire.KindBarrage, By: "op"}
			for range 2 {
				if _, _, err := s.Add(ctx, room, td, 10, time.Now().Add(time.Hour)); err != nil {
					return err
				}
			}
			if _, _, _, err := s.Lookup(ctx, room, td.ID, td.Kind); err != nil {
				return err
			}
			_, err := s.List(ctx, room)
			return err
		}),
		step(redisx.ACLIngest, "lottery: start, enter, count, list, stop", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := ingest.NewRedisLotteryStore(rdb, nil)
			if _, err := s.Start(ctx, ingest.Lottery{ID: "lot", Room: room, Keyword: "me", Until: time.Now().Add(time.Hour)}); err != nil {
				return err
			}
			if _, err := s.Enter(ctx, room, "lot", "alice"); err != nil {
				return err
			}
			if _, err := s.Count(ctx, room, "lot"); err != nil {
				return err
			}
			if _, _, err := s.Entrants(ctx, room, "lot", 0, 10); err != nil {
				return err
			}
			if _, _, err := s.Running(ctx); err != nil {
				return err
			}
			if _, err := s.Version(ctx); err != nil {
				return err
			}
			_, err := s.Stop(ctx, room, "lot", time.Now())
			return err
		}),
		step(redisx.ACLIngest, "reports: add, list, decide, history", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := ingest.NewRedisReportStore(rdb, ingest.ReportBounds{Messages: 1})
			now := time.Now()
			for i, user := range []string{"alice", "alice", "bob"} {
				id := wire.FormatID(now.UnixMilli(), uint64(i/2)) // the third evicts the first
				r := ingest.Report{Room: room, Message: ingest.ReportedMessage{ID: id, Kind: wire.KindBarrage, User: "troll", Known: true},
					Reporter: user, Reason: ingest.ReportSpam, At: now, Expires: now.Add(time.Hour)}
				if _, err := s.Add(ctx, r); err != nil {
					return err
				}
			}
			if _, err := s.Top(ctx, room, 10); err != nil {
				return err
			}
			if _, err := s.Decide(ctx, room, wire.KindBarrage, wire.FormatID(now.UnixMilli(), 1), ingest.ReportDecision{Action: ingest.ActionDismiss, At: now}); err != nil {
				return err
			}
			_, err := s.History(ctx, room, "troll")
			return err
		}),
		step(redisx.ACLIngest, "bans: put, read, lift, purge", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := ingest.NewRedisBanStore(rdb)
			if err := s.Put(ctx, ingest.Ban{User: "troll", Until: time.Now().Add(time.Hour), At: time.Now()}); err != nil {
				return err
			}
			if _, err := s.User(ctx, "troll"); err != nil {
				return err
			}
			if _, err := s.Version(ctx); err != nil {
				return err
			}
			if _, _, err := s.List(ctx); err != nil {
				return err
			}
			if err := s.Delete(ctx, "troll", ""); err != nil {
				return err
			}
			_, err := s.Purge(ctx, time.Now())
			return err
		}),
		step(redisx.ACLIngest, "event bucket: take", func(ctx context.Context, rdb redis.UniversalClient) error {
			_, err := ingest.NewRedisGlobalLimiter(rdb).Take(ctx, ev, 100, 10, 5)
			return err
		}),
	)

	// The edge and the gslb read the bans (the edge closes and refuses
	// banned users, the gslb refuses their entry), as ban.List does.
	for _, role := range []string{redisx.ACLEdge, redisx.ACLGSLB} {
		steps = append(steps, step(role, "bans: version, list", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := ingest.NewRedisBanStore(rdb)
			if _, err := s.Version(ctx); err != nil {
				return err
			}
			_, _, err := s.List(ctx)
			return err
		}))
	}

	// The edge: reports load and online counts, reads what it serves.
	steps = append(steps, readers(redisx.ACLEdge, true)...)
	steps = append(steps, limits(redisx.ACLEdge)...)
	steps = append(steps,
		step(redisx.ACLEdge, "load: report, remove", func(ctx context.Context, rdb redis.UniversalClient) error {
			if err := report("edge-1", loadtable.KindEdge)(ctx, rdb); err != nil {
				return err
			}
			if err := report("edge-2", loadtable.KindEdge)(ctx, rdb); err != nil {
				return err
			}
			return load(rdb).Remove(ctx, "edge-2")
		}),
		step(redisx.ACLEdge, "online counts: report, remove", func(ctx context.Context, rdb redis.UniversalClient) error {
			for _, id := range []string{"edge-1", "edge-2"} {
				if err := load(rdb).ReportOnline(ctx, id, map[string]int{room: 3}); err != nil {
					return err
				}
			}
			return load(rdb).RemoveOnline(ctx, "edge-2")
		}),
		step(redisx.ACLEdge, "lanes: read the live lane and the site stream", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := streams[redisx.ACLEdge]
			var err error
			if lastLive, err = s.LastID(ctx, liveKey); err != nil {
				return err
			}
			if _, err := s.Read(ctx, liveKey, "0", 10, 0); err != nil {
				return err
			}
			// A blocking read from "now", as a hub starts.
			if _, err := s.Read(ctx, liveKey, "$", 10, 5*time.Millisecond); err != nil {
				return err
			}
			_, err = s.Read(ctx, stream.SiteKey, "0", 10, 0)
			return err
		}),
	)
	steps = append(steps, step(redisx.ACLIngest, "online counts: read", func(ctx context.Context, rdb redis.UniversalClient) error {
		got, err := load(rdb).Online(ctx)
		if err == nil && got["edge-1"][room] != 3 {
			err = fmt.Errorf("online %v", got)
		}
		return err
	}))

	// The slicer: consumer groups, leases, backlog, settings, room end.
	group := "slicers"
	steps = append(steps, readers(redisx.ACLSlicer, false)...)
	steps = append(steps,
		step(redisx.ACLSlicer, "rooms: list", func(ctx context.Context, rdb redis.UniversalClient) error {
			rooms, err := streams[redisx.ACLSlicer].Rooms(ctx)
			if err == nil && len(rooms) == 0 {
				err = errors.New("no room registered")
			}
			return err
		}),
		step(redisx.ACLSlicer, "lease: acquire, renew, release", func(ctx context.Context, rdb redis.UniversalClient) error {
			l := slicer.NewRedisLease(rdb)
			for range 2 {
				if ok, err := l.Acquire(ctx, room, "slicer-1", time.Minute); err != nil || !ok {
					return fmt.Errorf("acquire: %v, %v", ok, err)
				}
			}
			return l.Release(ctx, room, "slicer-1")
		}),
		step(redisx.ACLSlicer, "lanes: drain, claim, ack, pending, trim", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := streams[redisx.ACLSlicer]
			_, b, l, err := s.DrainRoom(ctx, room, group, "slicer-1", 100)
			if err != nil {
				return err
			}
			if len(b) == 0 || len(l) == 0 {
				return fmt.Errorf("drained %d barrage, %d live entries", len(b), len(l))
			}
			for _, k := range []stream.Key{barrageKey, liveKey} {
				if _, err := s.Claim(ctx, k, group, "slicer-2", 0, 0); err != nil {
					return err
				}
				if _, _, err := s.PendingFloor(ctx, k, group); err != nil {
					return err
				}
			}
			if err := s.Ack(ctx, barrageKey, group, b[0].ID); err != nil {
				return err
			}
			return s.TrimBefore(ctx, barrageKey, b[0].ID)
		}),
		step(redisx.ACLSlicer, "site stream: read in a group, ack, trim, drop the group", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := streams[redisx.ACLSlicer]
			es, err := s.ReadGroup(ctx, stream.SiteKey, group+"-"+room, "slicer-1", 10, 0)
			if err != nil {
				return err
			}
			if len(es) == 0 {
				return errors.New("no site entry")
			}
			if err := s.Ack(ctx, stream.SiteKey, group+"-"+room, es[0].ID); err != nil {
				return err
			}
			if err := s.TrimBefore(ctx, stream.SiteKey, es[0].ID); err != nil {
				return err
			}
			return s.DropGroup(ctx, stream.SiteKey, group+"-"+room)
		}),
		step(redisx.ACLSlicer, "gift backlog: set, get", func(ctx context.Context, rdb redis.UniversalClient) error {
			b := slicer.NewRedisBacklog(rdb)
			if err := b.Set(ctx, room, 1.5, 0.1, time.Minute); err != nil {
				return err
			}
			_, err := b.Get(ctx, room)
			return err
		}),
		step(redisx.ACLSlicer, "settings: save, load", func(ctx context.Context, rdb redis.UniversalClient) error {
			s := slicer.NewRedisSettings(rdb)
			if err := s.Save(ctx, slicer.Settings{Budget: 60}); err != nil {
				return err
			}
			_, err := s.Load(ctx)
			return err
		}),
		step(redisx.ACLSlicer, "store clock", func(ctx context.Context, rdb redis.UniversalClient) error {
			_, err := streams[redisx.ACLSlicer].Now(ctx)
			return err
		}),
	)
	// The edge finds an emptied lane's last id (XINFO STREAM), then the
	// slicer ends the room.
	steps = append(steps,
		step(redisx.ACLSlicer, "lanes: trim the live lane empty", func(ctx context.Context, rdb redis.UniversalClient) error {
			ms, seq, err := wire.ParseID(lastLive)
			if err != nil {
				return err
			}
			return streams[redisx.ACLSlicer].TrimBefore(ctx, liveKey, wire.FormatID(ms, seq+1))
		}),
		step(redisx.ACLEdge, "lanes: last id of an emptied lane", func(ctx context.Context, rdb redis.UniversalClient) error {
			id, err := streams[redisx.ACLEdge].LastID(ctx, liveKey)
			if err == nil && id != lastLive {
				err = fmt.Errorf("last id %s, want %s", id, lastLive)
			}
			return err
		}),
		step(redisx.ACLSlicer, "rooms: close", func(ctx context.Context, rdb redis.UniversalClient) error {
			return streams[redisx.ACLSlicer].CloseRoom(ctx, room, time.Hour)
		}),
	)

	// The gslb follows the table the nodes wrote and prunes what aged.
	steps = append(steps,
		step(redisx.ACLGSLB, "load: read whole, then what changed", func(ctx context.Context, rdb redis.UniversalClient) error {
			ch, cur, err := load(rdb).Changes(ctx, nil)
			if err != nil {
				return err
			}
			if len(ch.Loads) == 0 {
				return errors.New("no node in the table")
			}
			loadCursor = cur
			_, _, err = load(rdb).Changes(ctx, loadCursor)
			return err
		}),
		step(redisx.ACLGSLB, "load: prune aged reports and their online counts", func(ctx context.Context, rdb redis.UniversalClient) error {
			n, err := load(rdb).Prune(ctx, now)
			if err == nil && n == 0 {
				err = errors.New("pruned nothing")
			}
			return err
		}),
	)
	// The operators read for diagnosis.
	steps = append(steps, step(redisx.ACLOps, "diagnosis: read events, a lane, the load table", func(ctx context.Context, rdb redis.UniversalClient) error {
		if err := rdb.HGetAll(ctx, event.EventsKey).Err(); err != nil {
			return err
		}
		if err := rdb.XInfoStream(ctx, redisx.RoomKey(room, "barrage")).Err(); err != nil {
			return err
		}
		return rdb.HGetAll(ctx, redisx.Prefix+"{load:0}:nodes").Err()
	}))
	return steps
}
