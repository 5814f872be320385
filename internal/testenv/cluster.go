package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// clusterMasters is how many masters RedisCluster starts; each gets one
	// replica. Three is the smallest cluster whose masters can vote a failed
	// one out (a majority of masters must agree), so a test can kill one and
	// watch its replica take over.
	clusterMasters = 3
	// clusterSlots is the number of hash slots of every Redis Cluster.
	clusterSlots = 16384
	// defaultClusterNodeTimeout is cluster-node-timeout when ClusterConfig
	// leaves it zero: short enough that a killed master's replica takes
	// over in about two seconds, long enough that a node starved of CPU
	// for a moment on a loaded 2-core CI machine under -race is not voted
	// out in the middle of a conformance test.
	defaultClusterNodeTimeout = 2 * time.Second
	// clusterReadyTimeout bounds the start of a cluster (six servers, the
	// create, the replicas' first sync) and every wait for it to be
	// healthy again after a failover.
	clusterReadyTimeout = 30 * time.Second
	// clusterCmdTimeout bounds one admin command to one node.
	clusterCmdTimeout = 2 * time.Second
)

var redisCliBinary = binary{
	name:    "redis-cli",
	envVar:  "DANMAKU_REDIS_CLI",
	extra:   []string{"/usr/bin", "/usr/local/bin"},
	install: "Debian package redis-tools, a dependency of redis-server",
}

// ClusterConfig tunes RedisClusterWith. The zero value is RedisCluster's.
type ClusterConfig struct {
	// NodeTimeout is every node's cluster-node-timeout: how long a master
	// may be unreachable before the others mark it failed and its replica
	// is promoted. Zero: 2 s.
	NodeTimeout time.Duration
	// Replicas is the number of replicas of each of the three masters.
	// Zero: 1. With 2, a master that fails over keeps a replica (the
	// other one follows the promoted replica), as a production cluster
	// that must survive two failures in a row does.
	Replicas int
}

// Cluster is a running local Redis Cluster of three masters with one
// replica each (ClusterConfig.Replicas), every node a redis-server of its
// own on loopback ports, in its own directory, persisting like
// RedisRestartable (append-only file fsynced on every write). Its methods
// are safe for concurrent use.
type Cluster struct {
	nodes       []*ClusterNode
	nodeTimeout time.Duration
}

// ClusterNode is one redis-server of a Cluster.
type ClusterNode struct {
	// Addr is the node's client address, "127.0.0.1:PORT".
	Addr string
	// ID is the node's cluster node id (CLUSTER MYID).
	ID string

	bin  string
	args []string
	dir  string

	mu sync.Mutex
	p  *process // nil once stopped or killed
}

// RedisCluster starts a Redis Cluster for t — three masters, three replicas
// — and waits until every node reports cluster_state:ok with all 16384 slots
// covered and every replica has finished its first sync. It is stopped when
// t ends (and its nodes' logs shown if t failed). A missing redis-server or
// redis-cli skips t, or fails it when servers are required (RequireServers).
//
// Starting six servers takes a second or two; tests that only need a clean
// cluster should share one through SharedRedisCluster. A test that kills a
// node or fails one over needs its own.
func RedisCluster(t testing.TB) *Cluster { return RedisClusterWith(t, ClusterConfig{}) }

// RedisClusterWith is RedisCluster with cfg.
func RedisClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	bin, cli := redisBinary.require(t), redisCliBinary.require(t)
	c, err := startCluster(bin, cli, t.TempDir(), cfg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: redis cluster logs:\n%s", c.logTails())
		}
		c.stop()
	})
	return c
}

// Addrs returns every node's address: the seeds a cluster client starts
// from (any one would do; all of them survive the loss of any node).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// URL returns the seeds as one comma-separated list, the form
// redisx.Config.URL and DANMAKU_REDIS take for a cluster.
func (c *Cluster) URL() string { return strings.Join(c.Addrs(), ",") }

// Nodes returns the cluster's nodes, masters and replicas, in start order
// (which is no guide to their roles: failovers change them).
func (c *Cluster) Nodes() []*ClusterNode { return slices.Clone(c.nodes) }

// NodeTimeout returns the nodes' cluster-node-timeout.
func (c *Cluster) NodeTimeout() time.Duration { return c.nodeTimeout }

// MasterOf returns the node that serves key now, as the cluster's view
// from a live node says.
func (c *Cluster) MasterOf(t testing.TB, key string) *ClusterNode {
	t.Helper()
	n, err := c.masterOf(key)
	if err != nil {
		t.Fatalf("testenv: master of %q: %v", key, err)
	}
	return n
}

// ReplicaOf returns a replica of master (the first in the cluster's view).
func (c *Cluster) ReplicaOf(t testing.TB, master *ClusterNode) *ClusterNode {
	t.Helper()
	views, err := c.view()
	if err != nil {
		t.Fatalf("testenv: replica of %s: %v", master.Addr, err)
	}
	for _, v := range views {
		if v.master == master.ID && !v.failed() {
			if n := c.byID(v.id); n != nil {
				return n
			}
		}
	}
	t.Fatalf("testenv: %s (%s) has no replica in the cluster's view", master.Addr, master.ID)
	return nil
}

// WaitHealthy waits until every live node reports cluster_state:ok with
// every slot served by a live master, all live nodes agree on which master
// serves which slots, and every replica of a live master is in sync with it
// (master_link_status:up) — as after a failover has settled. It fails t
// after 30 s.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := c.waitHealthy(clusterReadyTimeout); err != nil {
		t.Fatalf("testenv: %v\nlogs:\n%s", err, c.logTails())
	}
}

// FlushAll empties every master (FLUSHALL, which their replicas follow).
func (c *Cluster) FlushAll(t testing.TB) {
	t.Helper()
	if err := c.flushAll(); err != nil {
		t.Fatalf("testenv: flush cluster: %v", err)
	}
}

// Kill stops the node the hard way, as a crash does: SIGKILL, no chance to
// flush or close connections. Killing a stopped node does nothing. What it
// had acknowledged but not yet sent to its replica is lost with it if the
// replica is promoted.
func (n *ClusterNode) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		return
	}
	if err := syscall.Kill(-n.p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		n.p.stop()
	}
	<-n.p.done
	n.p = nil
}

// Pause stops the node's process (SIGSTOP) until Resume: it keeps its
// connections and answers nothing, as a node stalled by its machine. A
// paused replica stays "online" in its master's view, acknowledging no
// write. Pausing a stopped node does nothing. Resume it before t ends, or
// sooner than the cluster's node timeout unless the test wants it voted
// out.
func (n *ClusterNode) Pause() { n.sendSignal(syscall.SIGSTOP) }

// Resume continues a paused node (SIGCONT).
func (n *ClusterNode) Resume() { n.sendSignal(syscall.SIGCONT) }

func (n *ClusterNode) sendSignal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		_ = syscall.Kill(-n.p.cmd.Process.Pid, sig)
	}
}

// Stop stops the node gracefully (SIGTERM, then SIGKILL after 5 s).
func (n *ClusterNode) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		n.p.stop()
		n.p = nil
	}
}

// Start starts a stopped or killed node again on its ports with its data
// and its nodes.conf, so it rejoins the cluster (as a replica, if its slots
// were taken over meanwhile), and waits until it answers PING.
func (n *ClusterNode) Start(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		return
	}
	p, err := startProcess("redis", n.bin, n.args, n.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.waitReady(func() error { return redisPing(n.Addr) }); err != nil {
		p.stop()
		t.Fatalf("testenv: restart cluster node %s: %v\nlog:\n%s", n.Addr, err, p.logTail())
	}
	n.p = p
}

// Alive reports whether the node's process is running (as far as the test
// knows: it was started and not stopped or killed through the handle).
func (n *ClusterNode) Alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p != nil && !n.p.exited()
}

// Failover asks the node, a replica, to take over its master's slots with
// CLUSTER FAILOVER: the graceful kind, where the master stops accepting
// writes, the replica catches up with it and only then is promoted, so no
// acknowledged write is lost. It returns once the replica has accepted the
// request and the node itself reports the master role. The rest of the
// cluster learns of it a moment later (WaitHealthy waits for that): the
// old layout is healthy too, so waiting for health alone could return
// before the promotion, as it did on a loaded CI machine.
func (n *ClusterNode) Failover(t testing.TB) {
	t.Helper()
	if _, err := redisDo(n.Addr, clusterCmdTimeout, "CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("testenv: CLUSTER FAILOVER on %s: %v", n.Addr, err)
	}
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		r, err := n.Role()
		if err == nil && r == "master" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s still %q (%v) %s after CLUSTER FAILOVER\nlog:\n%s", n.Addr, r, err, clusterReadyTimeout, n.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Do sends one command to this node alone (no redirection) and returns its
// reply decoded: a string, an int64, nil, or a []any of those; a Redis
// error reply is returned as the error.
func (n *ClusterNode) Do(args ...string) (any, error) {
	return redisDo(n.Addr, clusterCmdTimeout, args...)
}

// Role returns "master" or "slave" as the node's INFO replication says.
func (n *ClusterNode) Role() (string, error) {
	info, err := redisString(n.Addr, clusterCmdTimeout, "INFO", "replication")
	if err != nil {
		return "", err
	}
	return infoField(info, "role"), nil
}

// logTail returns the end of the node's current log.
func (n *ClusterNode) logTail() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		b, err := os.ReadFile(filepath.Join(n.dir, "redis.log"))
		if err != nil {
			return "(stopped)"
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return strings.Join(lines[max(0, len(lines)-20):], "\n")
	}
	return n.p.logTail()
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", n.Addr, n.dir, n.logTail())
	}
	return b.String()
}

func (c *Cluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.Stop)
	}
	wg.Wait()
}

func (c *Cluster) byID(id string) *ClusterNode {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

func (c *Cluster) live() []*ClusterNode {
	var out []*ClusterNode
	for _, n := range c.nodes {
		if n.Alive() {
			out = append(out, n)
		}
	}
	return out
}

// startCluster starts the nodes, creates the cluster with redis-cli and
// waits until it is healthy. On error nothing is left running.
func startCluster(bin, cli, dir string, cfg ClusterConfig) (c *Cluster, err error) {
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = defaultClusterNodeTimeout
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	c = &Cluster{nodeTimeout: cfg.NodeTimeout}
	defer func() {
		if err != nil {
			logs := c.logTails()
			c.stop()
			err = fmt.Errorf("%w\nlogs:\n%s", err, logs)
		}
	}()
	size := clusterMasters * (1 + cfg.Replicas)
	for i := range size {
		n, err := startClusterNode(bin, filepath.Join(dir, fmt.Sprintf("node%d", i+1)), cfg.NodeTimeout)
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	// redis-cli makes the first three masters, the others their replicas,
	// and returns once every node has joined and agrees on the slots.
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return c, fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range c.nodes {
		if n.ID, err = redisString(n.Addr, clusterCmdTimeout, "CLUSTER", "MYID"); err != nil {
			return c, fmt.Errorf("CLUSTER MYID on %s: %w", n.Addr, err)
		}
	}
	return c, c.waitHealthy(clusterReadyTimeout)
}

// startClusterNode starts one node on two fresh ports (client and cluster
// bus), retrying on other ports when it loses the race for one.
func startClusterNode(bin, dir string, nodeTimeout time.Duration) (*ClusterNode, error) {
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(2)
		if err != nil {
			return nil, err
		}
		adir := fmt.Sprintf("%s-%d", dir, attempt)
		if err := os.MkdirAll(adir, 0o755); err != nil {
			return nil, err
		}
		n := &ClusterNode{
			Addr: "127.0.0.1:" + strconv.Itoa(ports[0]),
			bin:  bin,
			dir:  adir,
			args: []string{
				"--port", strconv.Itoa(ports[0]),
				"--bind", "127.0.0.1",
				"--dir", adir,
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
				// The bus port is chosen like the client port instead of
				// the default port+10000, which nothing checked was free.
				"--cluster-port", strconv.Itoa(ports[1]),
				// As a managed Redis keeps acknowledged writes: the
				// append-only file, fsynced before every reply. (What it
				// cannot keep is what the master acknowledged and died with
				// before its replica got it: replication is asynchronous.)
				"--appendonly", "yes",
				"--appendfsync", "always",
				"--save", "",
				// A replica's first sync starts at once instead of after
				// the 5 s a master waits for more replicas to share it.
				"--repl-diskless-sync-delay", "0",
				"--daemonize", "no",
				"--logfile", "",
			},
		}
		p, err := startProcess("redis", bin, n.args, adir)
		if err != nil {
			return nil, err
		}
		err = p.waitReady(func() error { return redisPing(n.Addr) })
		if err == nil {
			n.p = p
			return n, nil
		}
		p.stop()
		if !errors.Is(err, errExited) || attempt >= startAttempts {
			return nil, fmt.Errorf("cluster node %s: %w\nlog:\n%s", n.Addr, err, p.logTail())
		}
	}
}

// nodeView is one line of CLUSTER NODES: how one node sees another.
type nodeView struct {
	id, addr string
	flags    []string
	master   string // the master's id for a replica, "-" for a master
	slots    []string
	linkUp   bool
}

func (v nodeView) has(flag string) bool { return slices.Contains(v.flags, flag) }
func (v nodeView) failed() bool         { return v.has("fail") || v.has("fail?") }

// parseNodes parses CLUSTER NODES.
func parseNodes(s string) ([]nodeView, error) {
	var out []nodeView
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, nodeView{
			id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3],
			linkUp: f[7] == "connected", slots: f[8:],
		})
	}
	return out, nil
}

// ownership renders which master serves which slots in one node's view,
// for comparing views: "addr:slots addr:slots ..." sorted.
func ownership(views []nodeView) string {
	var parts []string
	for _, v := range views {
		if v.has("master") && len(v.slots) > 0 {
			parts = append(parts, v.addr+":"+strings.Join(v.slots, ","))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// view returns CLUSTER NODES as the first live node that answers sees it.
func (c *Cluster) view() ([]nodeView, error) {
	var last error = errors.New("no live node")
	for _, n := range c.live() {
		s, err := redisString(n.Addr, clusterCmdTimeout, "CLUSTER", "NODES")
		if err != nil {
			last = err
			continue
		}
		return parseNodes(s)
	}
	return nil, last
}

func (c *Cluster) masterOf(key string) (*ClusterNode, error) {
	live := c.live()
	if len(live) == 0 {
		return nil, errors.New("no live node")
	}
	v, err := redisDo(live[0].Addr, clusterCmdTimeout, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return nil, err
	}
	slot, ok := v.(int64)
	if !ok {
		return nil, fmt.Errorf("CLUSTER KEYSLOT answered %v", v)
	}
	views, err := c.view()
	if err != nil {
		return nil, err
	}
	for _, v := range views {
		if !v.has("master") || v.failed() {
			continue
		}
		for _, r := range v.slots {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.ParseInt(lo, 10, 64)
			b, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				if n := c.byID(v.id); n != nil {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no live master serves slot %d", slot)
}

// healthy returns nil if the cluster is healthy (see WaitHealthy), else
// what is not yet.
func (c *Cluster) healthy() error {
	live := c.live()
	liveIDs := map[string]bool{}
	for _, n := range live {
		liveIDs[n.ID] = true
	}
	var agreed string
	for i, n := range live {
		info, err := redisString(n.Addr, clusterCmdTimeout, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", n.Addr, st)
		}
		if ok := infoField(info, "cluster_slots_ok"); ok != strconv.Itoa(clusterSlots) {
			return fmt.Errorf("%s: cluster_slots_ok:%s", n.Addr, ok)
		}
		s, err := redisString(n.Addr, clusterCmdTimeout, "CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr, err)
		}
		views, err := parseNodes(s)
		if err != nil {
			return err
		}
		masters := 0
		for _, v := range views {
			if !v.has("master") || len(v.slots) == 0 {
				continue
			}
			masters++
			if !liveIDs[v.id] || v.failed() {
				return fmt.Errorf("%s sees slots %v served by %s, which is down or failing", n.Addr, v.slots, v.addr)
			}
		}
		if masters != clusterMasters {
			return fmt.Errorf("%s sees %d masters with slots, want %d", n.Addr, masters, clusterMasters)
		}
		// Every live node is settled in this view: a master with slots,
		// or a replica of one (a demoted master is seen following its
		// successor).
		for _, v := range views {
			if !liveIDs[v.id] {
				continue
			}
			if v.failed() {
				return fmt.Errorf("%s sees live node %s as failing", n.Addr, v.addr)
			}
			if v.has("master") && len(v.slots) > 0 {
				continue
			}
			if j := slices.IndexFunc(views, func(m nodeView) bool { return m.id == v.master }); j < 0 || !views[j].has("master") || len(views[j].slots) == 0 {
				return fmt.Errorf("%s sees %s neither serving slots nor replicating a master that does", n.Addr, v.addr)
			}
		}
		own := ownership(views)
		if i == 0 {
			agreed = own
		} else if own != agreed {
			return fmt.Errorf("nodes disagree on the slots: %q vs %q", agreed, own)
		}
		info, err = redisString(n.Addr, clusterCmdTimeout, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", n.Addr, err)
		}
		if infoField(info, "role") == "slave" {
			me := slices.IndexFunc(views, func(v nodeView) bool { return v.has("myself") })
			if me >= 0 && liveIDs[views[me].master] && infoField(info, "master_link_status") != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", n.Addr, infoField(info, "master_link_status"))
			}
		}
	}
	return nil
}

func (c *Cluster) waitHealthy(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := c.healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis cluster not healthy after %v: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) flushAll() error {
	views, err := c.view()
	if err != nil {
		return err
	}
	for _, v := range views {
		if !v.has("master") || v.failed() || len(v.slots) == 0 {
			continue
		}
		n := c.byID(v.id)
		if n == nil {
			return fmt.Errorf("unknown master %s", v.addr)
		}
		if _, err := redisDo(n.Addr, clusterCmdTimeout, "FLUSHALL"); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", n.Addr, err)
		}
	}
	return nil
}

// The shared cluster: one per test binary, for the tests that only need an
// empty cluster (conformance suites), so that a package's tests do not
// start six servers each.
var shared struct {
	mu     sync.Mutex
	inMain bool
	c      *Cluster
	dir    string
	err    error
	holder string // name of the test using the cluster now, "" if none
}

// Main runs a test binary's tests and then stops what they shared
// (SharedRedisCluster). A package that uses SharedRedisCluster, directly or
// through redistest.Cluster, needs
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// It is also the entry of BenchHTTP's load client in a child process: with
// that process's environment it sends the load and exits, running no test.
func Main(m *testing.M) {
	if file := os.Getenv(benchLoadEnv); file != "" {
		os.Exit(runBenchClient(file, os.Stdin, os.Stdout))
	}
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	if shared.c != nil {
		shared.c.stop()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// SharedRedisCluster returns the test binary's shared Redis Cluster (as
// RedisCluster's), started by the first call and stopped by Main when the
// binary's tests are done, emptied (FlushAll) for t. Tests that use it must
// not run in parallel with each other: a call while another test (other
// than an ancestor of t) holds it fails t. A test that kills or fails over
// a node must use a cluster of its own (RedisCluster).
func SharedRedisCluster(t testing.TB) *Cluster {
	t.Helper()
	bin, cli := redisBinary.require(t), redisCliBinary.require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("testenv: SharedRedisCluster needs the package's TestMain to call testenv.Main, which stops the cluster when the tests end")
	}
	name := t.Name()
	switch {
	case shared.holder == "":
		shared.holder = name
		t.Cleanup(func() {
			shared.mu.Lock()
			shared.holder = ""
			shared.mu.Unlock()
		})
	case name == shared.holder || strings.HasPrefix(name, shared.holder+"/"):
		// A subtest of the test that holds it.
	default:
		t.Fatalf("testenv: the shared Redis Cluster is in use by %s; tests sharing it must not run in parallel", shared.holder)
	}
	if shared.c == nil && shared.err == nil {
		shared.dir, shared.err = os.MkdirTemp("", "danmaku-redis-cluster-")
		if shared.err == nil {
			shared.c, shared.err = startCluster(bin, cli, shared.dir, ClusterConfig{})
		}
	}
	if shared.err != nil {
		t.Fatalf("testenv: shared redis cluster: %v", shared.err)
	}
	c := shared.c
	if err := c.healthy(); err != nil {
		t.Fatalf("testenv: the shared redis cluster is not healthy (a test killed a node of it?): %v", err)
	}
	if err := c.flushAll(); err != nil {
		t.Fatalf("testenv: flush the shared redis cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: shared redis cluster logs:\n%s", c.logTails())
		}
	})
	return c
}
