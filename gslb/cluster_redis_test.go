package gslb_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testwait"
)

// TestTwoAllocatorsTenNodesOnRedis is issue 9's acceptance 4 on a real
// Redis: ten nodes report through their Reporters, two allocators sync
// the same table and agree (the same sticky ingest for every user, the
// same edges handed out); a node that stops reporting without leaving (a
// crash) drops out of both within the stale time; a token signed by one
// process's keyring verifies on another's from its first request, and
// across an epoch boundary nothing fails. The waits are bounds against
// hanging, not speed requirements.
func TestTwoAllocatorsTenNodesOnRedis(t *testing.T) {
	rdb := redistest.Client(t)
	table := loadtable.NewRedisTable(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Ten nodes: five edges, five ingests. edge-0 crashes later: its
	// reporter is stopped without removing it, as a dead process would.
	crash, crashed := context.WithCancel(context.Background())
	defer crashed()
	for i := range 10 {
		kind, id := loadtable.KindEdge, fmt.Sprintf("edge-%d", i)
		if i >= 5 {
			kind, id = loadtable.KindIngest, fmt.Sprintf("ingest-%d", i)
		}
		l := loadtable.NodeLoad{ID: id, Kind: kind, Addr: "http://" + id, Capacity: 1000, Conns: 10 * i}
		r := &loadtable.Reporter{Table: table, Interval: 5 * time.Millisecond, Load: func() loadtable.NodeLoad { return l }}
		rctx := ctx
		if id == "edge-0" {
			rctx = crash
			r.Table = noRemove{table}
		}
		go func() { _ = r.Run(rctx) }()
	}
	var allocs [2]*gslb.Allocator
	for i := range allocs {
		a, err := gslb.NewAllocator(gslb.AllocatorConfig{Table: table, Stale: time.Second, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		allocs[i] = a
		go func() { _ = a.Run(ctx) }()
	}
	edgesOf := func(a *gslb.Allocator) map[string]bool {
		seen := map[string]bool{}
		for u := range 200 {
			if al, err := a.Allocate(fmt.Sprintf("u%d", u), netip.Addr{}); err == nil {
				seen[al.Edge[0]] = true
			}
		}
		return seen
	}
	ingestsOf := func(a *gslb.Allocator) map[string]bool {
		seen := map[string]bool{}
		for u := range 200 {
			if al, err := a.Allocate(fmt.Sprintf("u%d", u), netip.Addr{}); err == nil {
				seen[al.Ingest[0]] = true
			}
		}
		return seen
	}
	// All ten, the ingests too: an allocator that has not yet read one
	// ingest's first report chooses another for its users.
	waitFor(t, "both allocators see the ten nodes", func() bool {
		return len(edgesOf(allocs[0])) == 5 && len(edgesOf(allocs[1])) == 5 &&
			len(ingestsOf(allocs[0])) == 5 && len(ingestsOf(allocs[1])) == 5
	})
	for u := range 100 {
		user := fmt.Sprintf("u%d", u)
		a, err1 := allocs[0].Allocate(user, netip.Addr{})
		b, err2 := allocs[1].Allocate(user, netip.Addr{})
		if err1 != nil || err2 != nil || a.Ingest[0] != b.Ingest[0] {
			t.Fatalf("%s: ingest %v / %v (%v, %v): the allocators disagree", user, a.Ingest, b.Ingest, err1, err2)
		}
	}

	crashed()
	waitFor(t, "the crashed edge drops out of both", func() bool {
		for _, a := range allocs {
			if s := edgesOf(a); s["http://edge-0"] || len(s) != 4 {
				return false
			}
		}
		return true
	})

	// Tokens: an issuer and a verifier in two processes, one store.
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 9, 59, 0, time.UTC)) // a second before an epoch boundary
	secrets := auth.NewRedisSecrets(rdb)
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: master, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := center.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	issuer := keyringOn(t, secrets, clk)
	verifier := keyringOn(t, secrets, clk)
	if !verifier.Ready() {
		t.Fatal("a loaded verifier is not ready")
	}
	claims := auth.Claims{Room: "r1", Role: auth.RoleViewer}
	claims.Subject = "u1"
	before, _, err := issuer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verifier.Verify(before); err != nil {
		t.Fatalf("first request on the other node: %v", err)
	}
	// Across the boundary: the centre publishes the new epoch's
	// neighbours, both keyrings refresh, old and new tokens verify.
	clk.Advance(2 * time.Second)
	if err := center.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []*auth.Keyring{issuer, verifier} {
		if err := k.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after, _, err := issuer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"before the boundary": before, "after it": after} {
		if _, err := verifier.Verify(tok); err != nil {
			t.Fatalf("token signed %s: %v", name, err)
		}
	}
}

// noRemove is a table whose Remove does nothing: a crashed node never says
// goodbye.
type noRemove struct{ loadtable.Table }

func (noRemove) Remove(context.Context, string) error { return nil }

func keyringOn(t *testing.T, s auth.SecretStore, clk clock.Clock) *auth.Keyring {
	t.Helper()
	k, err := auth.NewKeyring(auth.KeyringConfig{Store: s, MasterKey: master, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if k.Ready() {
		t.Fatal("a keyring is ready before its first refresh")
	}
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return k
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testwait.For(t, what, ok)
}
