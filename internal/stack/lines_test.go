package stack

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"danmaku/auth"
	"danmaku/gslb/lines"
	"danmaku/internal/event"
)

// TestLinesWired: nodes of the "lo" line serve only clients the gslb
// classifies into it — here every loopback client, by the operator's CIDR
// file. Without the classifier they would be no one's (503 no_nodes).
func TestLinesWired(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the stack")
	}
	cidr := filepath.Join(t.TempDir(), "lines.txt")
	if err := os.WriteFile(cidr, []byte("127.0.0.0/8 lo local\n::1/128 lo local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := startStack(t, Config{Events: []event.Event{liveEvent("ln")}, Line: "lo", Lines: lines.Config{CIDR: cidr}})
	e := fetchEntry(t, st.URLs[RoleGSLB], "ln", ticket(t, "viewer", auth.RoleViewer))
	if len(e.Edge) == 0 || len(e.Ingest) == 0 {
		t.Fatalf("entry %+v: want the lo line's nodes", e)
	}
	req, _ := http.NewRequest(http.MethodGet, st.URLs[RoleGSLB]+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz %d with the keyring loaded", resp.StatusCode)
	}
}
