package ingest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
)

const (
	ingA = "http://ingest-a"
	ingB = "http://ingest-b"
	ingC = "http://ingest-c"
	edgA = "ws://edge-a/v1/ws"
)

// tokenFor is a verified token's claims: ingests first (primary first),
// then edges; ni 0 is a token signed before Ingests existed.
func tokenFor(ni int, addrs ...string) *auth.Claims {
	return &auth.Claims{Room: "r", Role: auth.RoleViewer, Addrs: addrs, Ingests: ni}
}

func TestBindingCheck(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ingestAt := func(id, addr string, age time.Duration) loadtable.NodeLoad {
		return loadtable.NodeLoad{ID: id, Kind: loadtable.KindIngest, Addr: addr, At: now.Add(-age)}
	}
	allLive := []loadtable.NodeLoad{ingestAt("a", ingA, 0), ingestAt("b", ingB, 0), ingestAt("c", ingC, 0), {ID: "e", Kind: loadtable.KindEdge, Addr: edgA, At: now}}
	bound := tokenFor(3, ingA, ingB, ingC, edgA)
	for _, tc := range []struct {
		name  string
		self  string
		loads []loadtable.NodeLoad // nil: no Update yet
		c     *auth.Claims
		want  Verdict
	}{
		{"primary", ingA, allLive, bound, Primary},
		{"primary, whatever the snapshot says of it", ingA, []loadtable.NodeLoad{}, bound, Primary},
		{"fallback while the primary is live", ingB, allLive, bound, NotPrimary},
		{"second fallback while the primary is live", ingC, allLive, bound, NotPrimary},
		{"fallback, primary absent from the snapshot", ingB, []loadtable.NodeLoad{ingestAt("b", ingB, 0)}, bound, Fallback},
		{"fallback, primary stale", ingB, []loadtable.NodeLoad{ingestAt("a", ingA, defaultBindingStale+time.Millisecond), ingestAt("b", ingB, 0)}, bound, Fallback},
		{"fallback, primary just within the stale bound", ingB, []loadtable.NodeLoad{ingestAt("a", ingA, defaultBindingStale)}, bound, NotPrimary},
		{"fallback, primary draining", ingB, []loadtable.NodeLoad{{ID: "a", Kind: loadtable.KindIngest, Addr: ingA, At: now, Draining: true}}, bound, Fallback},
		{"fallback, an edge at the primary's address does not count", ingB, []loadtable.NodeLoad{{ID: "x", Kind: loadtable.KindEdge, Addr: ingA, At: now}}, bound, Fallback},
		{"fallback, one of two reports of the primary's address is fresh", ingB, []loadtable.NodeLoad{ingestAt("a-old", ingA, time.Hour), ingestAt("a-new", ingA, 0)}, bound, NotPrimary},
		{"fallback before the first snapshot", ingB, nil, bound, Fallback},
		// The primary's clock 5 s behind: its stamp looks stale, but this
		// node's view read the report just now (Heard), which is what counts.
		{"fallback, primary's clock behind, its report just read", ingB, []loadtable.NodeLoad{{ID: "a", Kind: loadtable.KindIngest, Addr: ingA, At: now.Add(-5 * time.Second), Heard: now}}, bound, NotPrimary},
		{"fallback, primary's clock ahead, its report read long ago", ingB, []loadtable.NodeLoad{{ID: "a", Kind: loadtable.KindIngest, Addr: ingA, At: now.Add(5 * time.Second), Heard: now.Add(-defaultBindingStale - time.Millisecond)}}, bound, Fallback},
		{"old token without ingests", ingB, allLive, tokenFor(0, ingA, ingB, ingC, edgA), Unbound},
		{"this node does not know its address", "", allLive, bound, Unbound},
		{"this node named only as an edge", edgA, allLive, bound, NotIngest},
		{"this node not named at all", "http://ingest-z", allLive, bound, NotIngest},
		{"single ingest address, this node", ingA, allLive, tokenFor(1, ingA, edgA), Primary},
		{"single ingest address, another node", ingB, allLive, tokenFor(1, ingA, edgA), NotIngest},
		{"ingest count beyond the addresses", ingB, allLive, tokenFor(9, ingA, ingB), Unbound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBinding(tc.self, 0)
			if tc.loads != nil {
				b.Update(tc.loads)
			}
			got := b.Check(tc.c, now)
			if got != tc.want {
				t.Fatalf("Check = %v, want %v", got, tc.want)
			}
			if got.Allowed() != (tc.want == Primary || tc.want == Fallback || tc.want == Unbound) {
				t.Fatalf("%v: Allowed = %v", got, got.Allowed())
			}
		})
	}
}

// The primary's liveness is judged when the barrage comes, from the
// snapshot's report time: a primary that stops reporting is let go once
// its last report is stale, without another snapshot.
func TestBindingPrimaryGoesStale(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBinding(ingB, 2*time.Second)
	b.Update([]loadtable.NodeLoad{{ID: "a", Kind: loadtable.KindIngest, Addr: ingA, At: now}})
	c := tokenFor(2, ingA, ingB, edgA)
	for _, tc := range []struct {
		after time.Duration
		want  Verdict
	}{{0, NotPrimary}, {2 * time.Second, NotPrimary}, {2*time.Second + 1, Fallback}} {
		if got := b.Check(c, now.Add(tc.after)); got != tc.want {
			t.Fatalf("%v after the last report: %v, want %v", tc.after, got, tc.want)
		}
	}
	// Back: the next snapshot has a fresh report.
	b.Update([]loadtable.NodeLoad{{ID: "a", Kind: loadtable.KindIngest, Addr: ingA, At: now.Add(5 * time.Second)}})
	if got := b.Check(c, now.Add(6*time.Second)); got != NotPrimary {
		t.Fatalf("primary back: %v", got)
	}
}

func TestBindingRefusals(t *testing.T) {
	gin.SetMode(gin.TestMode)
	for _, tc := range []struct {
		v          Verdict
		status     int
		code       string
		retryAfter string
	}{
		{NotPrimary, http.StatusMisdirectedRequest, "not_primary", "1"},
		{NotIngest, http.StatusForbidden, "wrong_node", ""},
	} {
		t.Run(tc.v.String(), func(t *testing.T) {
			rec := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(rec)
			httpx.Abort(c, tc.v.refusal())
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if rec.Code != tc.status || body.Error.Code != tc.code || body.Error.Message == "" || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Fatalf("answer %d %s %q, Retry-After %q", rec.Code, body.Error.Code, body.Error.Message, rec.Header().Get("Retry-After"))
			}
		})
	}
	for v := Unbound; v <= NotIngest+1; v++ {
		if v.String() == "" {
			t.Fatalf("verdict %d has no name", v)
		}
	}
}

// Checks run on every request while the load sync swaps snapshots; -race
// checks them.
func TestBindingConcurrent(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBinding(ingB, 0)
	c := tokenFor(2, ingA, ingB)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			loads := []loadtable.NodeLoad{{ID: "b", Kind: loadtable.KindIngest, Addr: ingB, At: now}}
			if i%2 == 0 {
				loads = append(loads, loadtable.NodeLoad{ID: "a", Kind: loadtable.KindIngest, Addr: ingA, At: now})
			}
			b.Update(loads)
		}
	})
	for range 4 {
		wg.Go(func() {
			for range 500 {
				if v := b.Check(c, now); v != Fallback && v != NotPrimary {
					t.Errorf("verdict %v", v)
					return
				}
			}
		})
	}
	wg.Wait()
}
