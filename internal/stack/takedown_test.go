package stack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/sdk/wire"
)

// getObject reads key from the CDN base; ok is false for a 404.
func getObject(t *testing.T, ctx context.Context, cdn, key string) ([]byte, http.Header, bool) {
	t.Helper()
	code, b, h := call(t, ctx, http.MethodGet, strings.TrimRight(cdn, "/")+"/"+key, "", nil)
	switch code {
	case http.StatusOK:
		return []byte(b), h, true
	case http.StatusNotFound:
		return nil, nil, false
	}
	t.Fatalf("GET %s: %d %s", key, code, b)
	return nil, nil, false
}

// segmentAt reads room's slot of duration dur ms; ok is false for a 404.
func segmentAt(t *testing.T, ctx context.Context, cdn, room string, dur, slot int64) (*wire.Segment, bool) {
	t.Helper()
	b, _, ok := getObject(t, ctx, cdn, wire.SlotKey(room, dur, slot))
	if !ok {
		return nil, false
	}
	seg, err := wire.DecodeSegment(b)
	if err != nil {
		t.Fatal(err)
	}
	return seg, true
}

// TestTakedownEndToEnd: on the stack of every role, a comment is
// published, a host of the room takes it down through the ingest API, and
// a viewer connected to the edge gets the takedown in a frame's td; a
// segment after the comment's names it in its td; the room's takedown list
// on the CDN holds it and the manifest counts it. A host of another room
// is refused.
func TestTakedownEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real segments for a few seconds")
	}
	const room = "td-e2e"
	st := startStack(t, Config{Events: []event.Event{liveEvent(room), liveEvent("td-other")}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	viewer := fetchEntry(t, st.URLs[RoleGSLB], room, ticket(t, "alice", auth.RoleViewer))

	// A viewer on the edge, before anything happens.
	ws, resp, err := websocket.DefaultDialer.DialContext(ctx, viewer.Edge[0], http.Header{"Authorization": {"Bearer " + viewer.Token}})
	if err != nil {
		t.Fatalf("edge: %v (%v)", err, resp)
	}
	defer ws.Close()

	postJSON(t, viewer.Ingest[0]+"/v1/rooms/"+room+"/barrage", viewer.Token, map[string]string{"text": "take me down"})
	// Find the comment in its segment.
	var id string
	var idSlot int64
	waitFor(t, ctx, "the comment in a segment", func() bool {
		b, _, ok := getObject(t, ctx, viewer.CDN, wire.ManifestKey(room))
		if !ok {
			return false
		}
		m, err := wire.DecodeManifest(b)
		if err != nil {
			t.Fatal(err)
		}
		for slot := m.Slot(); slot > m.Slot()-30 && id == ""; slot-- {
			seg, ok := segmentAt(t, ctx, viewer.CDN, room, int64(m.Dur), slot)
			if !ok {
				continue
			}
			for _, msg := range seg.Messages {
				if msg.Text == "take me down" {
					id, idSlot = msg.ID, slot
				}
			}
		}
		return id != ""
	})
	td := wire.TakenDown{ID: id, Kind: wire.KindBarrage}
	takedownsURL := st.URLs[RoleIngest] + "/v1/admin/rooms/" + room + "/takedowns"
	body, _ := json.Marshal(map[string]any{"id": id, "k": 1, "reason": "abuse"})

	// A host of another room is refused; this room's host takes it down.
	other := fetchEntry(t, st.URLs[RoleGSLB], "td-other", ticket(t, "mallory", auth.RoleHost, "td-other"))
	if code, _, _ := call(t, ctx, "POST", takedownsURL, other.Token, body); code != http.StatusForbidden {
		t.Fatalf("a host of another room: %d, want 403", code)
	}
	host := fetchEntry(t, st.URLs[RoleGSLB], room, ticket(t, "hostess", auth.RoleHost, room))
	code, out, _ := call(t, ctx, "POST", takedownsURL, host.Token, body)
	if code != http.StatusCreated || !strings.Contains(out, `"by":"hostess"`) {
		t.Fatalf("takedown: %d %s", code, out)
	}

	// The connected viewer: a frame's td.
	for got := false; !got; {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("edge read: %v", err)
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			t.Fatal(err)
		}
		got = slices.Contains(f.TakenDown, td)
	}

	// Pollers: a later segment's td names it; the list holds it; the
	// manifest counts it.
	waitFor(t, ctx, "the takedown in the list and the manifest", func() bool {
		b, h, ok := getObject(t, ctx, viewer.CDN, wire.TakedownListKey(room))
		if !ok {
			return false
		}
		l, err := wire.DecodeTakedownList(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Get("Cache-Control") != wire.TakedownListCacheControl {
			t.Fatalf("list Cache-Control %q", h.Get("Cache-Control"))
		}
		mb, _, _ := getObject(t, ctx, viewer.CDN, wire.ManifestKey(room))
		m, err := wire.DecodeManifest(mb)
		return err == nil && slices.Contains(l.IDs, td) && l.N == 1 && m.Takedowns == 1
	})
	mb, _, _ := getObject(t, ctx, viewer.CDN, wire.ManifestKey(room))
	m, err := wire.DecodeManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	var named int64 = -1
	for slot := idSlot + 1; slot <= m.Slot() && named < 0; slot++ {
		if seg, ok := segmentAt(t, ctx, viewer.CDN, room, int64(m.Dur), slot); ok && slices.Contains(seg.TakenDown, td) {
			named = slot
		}
	}
	if named < 0 {
		t.Fatalf("no segment after %d up to %d names the takedown", idSlot, m.Slot())
	}
	// Listed for moderators, with who and why.
	code, out, _ = call(t, ctx, "GET", takedownsURL, DevServiceKey, nil)
	if code != http.StatusOK || !strings.Contains(out, `"reason":"abuse"`) || !strings.Contains(out, id) {
		t.Fatalf("list: %d %s", code, out)
	}
}

// call sends body (nil: none) with a bearer ("": none) and returns the
// status, body and header.
func call(t *testing.T, ctx context.Context, method, url, bearer string, body []byte) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("timed out")
		}
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}
