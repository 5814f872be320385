package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestBenchClientSendsTheLoad: the child's side of BenchHTTP's process
// mode waits for "go", sends every request of the load (the body's {i}
// filled in, the bearer values in turn) and says how many failed.
func TestBenchClientSendsTheLoad(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []string
		auths  = map[string]int{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(b))
		auths[r.Header.Get("Authorization")]++
		if strings.Contains(string(b), "#7#") {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	spec, err := json.Marshal(benchLoadSpec{URL: srv.URL, N: 12, InFlight: 3, Load: HTTPLoad{
		Method: http.MethodPost, Path: "/x", Body: `{"n":"#{i}#"}`, ContentType: "application/json",
		Auth: []string{"a", "b"}, Stride: 1,
	}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "load.json")
	if err := os.WriteFile(file, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := runBenchClient(file, strings.NewReader("go\n"), &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if want := benchLine + "ready\n" + benchLine + "done 1 status 429\n"; out.String() != want {
		t.Fatalf("said %q, want %q", out.String(), want)
	}
	slices.Sort(bodies)
	if len(bodies) != 12 || bodies[0] != `{"n":"#1#"}` || !slices.Contains(bodies, `{"n":"#12#"}`) {
		t.Errorf("bodies %q", bodies)
	}
	if auths["Bearer a"]+auths["Bearer b"] != 12 || auths["Bearer a"] == 0 || auths["Bearer b"] == 0 {
		t.Errorf("authorizations %v", auths)
	}

	out.Reset()
	if code := runBenchClient(file, strings.NewReader("stop\n"), &out); code != 2 {
		t.Errorf("sent without go: exit %d", code)
	}
	if code := runBenchClient(filepath.Join(t.TempDir(), "none.json"), strings.NewReader("go\n"), &out); code != 2 {
		t.Errorf("no load file: exit %d", code)
	}
}
