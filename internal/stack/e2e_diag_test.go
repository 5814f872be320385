package stack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// fetchLog records what one SDK client fetched from the CDN and what it
// logged, so that a failed TestEndToEnd names where a missed comment was
// last seen (issue 22: one viewer missed 1 of 60 comments with no drop,
// gap or jump counted). Recording is cheap (a path, a status, the body);
// everything is read only when the test fails.
type fetchLog struct {
	mu      sync.Mutex
	fetches []fetchRecord
	logs    bytes.Buffer
}

type fetchRecord struct {
	path   string
	status int
	body   []byte
}

func (f *fetchLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, ".msgpack") {
		return resp, err
	}
	var body []byte
	if resp.StatusCode == http.StatusOK {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	f.mu.Lock()
	f.fetches = append(f.fetches, fetchRecord{path: req.URL.Path, status: resp.StatusCode, body: body})
	f.mu.Unlock()
	return resp, nil
}

func (f *fetchLog) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logs.Write(p)
}

// client returns an HTTP client that records through f, and a logger that
// keeps the SDK's warnings in f.
func (f *fetchLog) client() (*http.Client, *slog.Logger) {
	return &http.Client{Transport: f}, slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// explainMissing logs, for each barrage text ("user|text") in want that
// some viewer lacks, where it was: in the room's stream (admitted, with its
// id and second), in which segment, and whether the first viewer lacking it
// fetched that segment and found it there. It also logs the non-zero drop
// counters of every role and that viewer's SDK log.
func explainMissing(t *testing.T, st *Stack, room string, want map[string]bool, have func(i int, key string) bool, viewers []*fetchLog) {
	t.Helper()
	ctx := context.Background()
	// Admitted: the barrage lane holds it (unless trimmed behind a segment).
	inStream := map[string]wire.Message{}
	if es, err := st.cfg.Backends.Shared.Streams.Read(ctx, stream.Key{Room: room, Lane: stream.Barrage}, "0", 100000, 0); err == nil {
		for _, e := range es {
			inStream[e.User+"|"+e.Text] = e
		}
	} else {
		t.Logf("diag: read the barrage stream: %v", err)
	}
	// Written: every segment from the manifest's second down.
	inSegment := map[string]string{} // key → segment path
	if obj, err := st.cfg.Backends.Shared.Objects.Get(ctx, wire.ManifestKey(room)); err == nil {
		man, _ := wire.DecodeManifest(obj.Body)
		for sec := man.Second; ; sec-- {
			key := wire.SegmentKey(room, sec)
			obj, err := st.cfg.Backends.Shared.Objects.Get(ctx, key)
			if err != nil {
				break
			}
			seg, err := wire.DecodeSegment(obj.Body)
			if err != nil {
				continue
			}
			for _, m := range seg.Messages {
				if m.Kind == wire.KindBarrage {
					inSegment[m.User+"|"+m.Text] = "/" + key
				}
			}
		}
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var lacking []int
		for i := range viewers {
			if !have(i, k) {
				lacking = append(lacking, i)
			}
		}
		if len(lacking) == 0 {
			continue
		}
		m, admitted := inStream[k]
		seg, written := inSegment[k]
		// A comment's stream entry is trimmed once its segment is
		// written: "not in stream" with a segment is the normal case.
		t.Logf("diag: %q missed by %d of %d viewers (first %d); in the untrimmed stream: %v (id %s); in segment: %v %s",
			k, len(lacking), len(viewers), lacking[0], admitted, m.ID, written, seg)
		if !admitted && !written {
			t.Logf("diag:   in no segment and not in the stream: dropped by a layer (see the counters below) or sampled by the slicer's budget")
		}
		f := viewers[lacking[0]]
		f.mu.Lock()
		fetchedIt := false
		for _, r := range f.fetches {
			if written && r.path != seg {
				continue
			}
			fetchedIt = true
			found := false
			if r.status == http.StatusOK {
				if s, err := wire.DecodeSegment(r.body); err == nil {
					for _, m := range s.Messages {
						found = found || m.User+"|"+m.Text == k
					}
				}
			}
			if written {
				t.Logf("diag:   viewer %d fetched %s: status %d, %d bytes, holds it: %v", lacking[0], r.path, r.status, len(r.body), found)
			} else if found {
				t.Logf("diag:   viewer %d found it in %s", lacking[0], r.path)
			}
		}
		if written && !fetchedIt {
			last := "none"
			if n := len(f.fetches); n > 0 {
				last = f.fetches[n-1].path
			}
			t.Logf("diag:   viewer %d never fetched %s (behind, not a loss: its last fetch was %s)", lacking[0], seg, last)
		}
		f.mu.Unlock()
	}
	if len(viewers) > 0 {
		var first *fetchLog
		for i := range viewers {
			for _, k := range keys {
				if !have(i, k) && first == nil {
					first = viewers[i]
				}
			}
		}
		if first != nil {
			first.mu.Lock()
			var paths []string
			for _, r := range first.fetches {
				paths = append(paths, fmt.Sprintf("%s:%d", strings.TrimPrefix(r.path, "/rooms/"+room+"/"), r.status))
			}
			t.Logf("diag: that viewer's segment fetches: %s", strings.Join(paths, " "))
			t.Logf("diag: that viewer's log:\n%s", first.logs.String())
			first.mu.Unlock()
		}
	}
	logDropCounters(t, st)
}

// logDropCounters logs every non-zero counter of the stack's registry whose
// name says it counts something not delivered.
func logDropCounters(t *testing.T, st *Stack) {
	t.Helper()
	mfs, err := st.registry.Gather()
	if err != nil {
		t.Logf("diag: gather: %v", err)
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.Contains(name, "drop") && !strings.Contains(name, "reject") && !strings.Contains(name, "overflow") &&
			!strings.Contains(name, "lost") && !strings.Contains(name, "superseded") && !strings.Contains(name, "late") {
			continue
		}
		for _, m := range mf.GetMetric() {
			if mf.GetType() != dto.MetricType_COUNTER || m.GetCounter().GetValue() == 0 {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			t.Logf("diag: %s{%s} = %v", name, strings.Join(labels, ","), m.GetCounter().GetValue())
		}
	}
}
