package stack

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/event"
)

// TestHostScope is issue 20's acceptance for roles: a host ticket for room
// A is a host in A, and in room B of the same event it is refused at entry
// (a scoped ticket) or handed a viewer's token (an unscoped one), which the
// ingest refuses announcements and lotteries with — in the real stack,
// through the gslb's entry and the ingest's routes.
func TestHostScope(t *testing.T) {
	now := time.Now()
	st := startStack(t, Config{Events: []event.Event{{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		Rooms: []event.Room{{ID: "room-a"}, {ID: "room-b"}}}}})
	entry := func(room, ticket string) (int, gslb.Entry) {
		t.Helper()
		return getEntry(t, st.URLs[RoleGSLB], room, ticket)
	}
	post := func(path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", st.URLs[RoleIngest]+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	announce := func(room, token string) int {
		return post("/v1/rooms/"+room+"/announce", token, `{"text":"hello"}`)
	}
	lottery := func(room, token string) int {
		return post("/v1/admin/rooms/"+room+"/lotteries", token, `{"id":"l-`+room+`","keyword":"go","duration_seconds":5}`)
	}

	hostA := ticket(t, "alice", auth.RoleHost, "room-a")
	code, inA := entry("room-a", hostA)
	if code != http.StatusOK || inA.Role != auth.RoleHost {
		t.Fatalf("host of A in A: %d, role %q", code, inA.Role)
	}
	if c := announce("room-a", inA.Token); c != http.StatusOK {
		t.Errorf("host of A announcing in A: %d", c)
	}
	if c := lottery("room-a", inA.Token); c != http.StatusCreated {
		t.Errorf("host of A starting a lottery in A: %d", c)
	}
	// A's token in B: the token names its room.
	refusedHostActions(t, "A's host token in B", announce, lottery, "room-b", inA.Token)
	// A's ticket at B's entry: refused.
	if code, _ := entry("room-b", hostA); code != http.StatusForbidden {
		t.Errorf("host of A entering B: %d", code)
	}
	// An unscoped host ticket: a viewer in B, refused host actions.
	code, inB := entry("room-b", ticket(t, "bob", auth.RoleHost))
	if code != http.StatusOK || inB.Role != auth.RoleViewer {
		t.Fatalf("unscoped host in B: %d, role %q", code, inB.Role)
	}
	refusedHostActions(t, "unscoped host in B", announce, lottery, "room-b", inB.Token)
}

// refusedHostActions checks that token's announcement and lottery in room
// are refused 403.
func refusedHostActions(t *testing.T, who string, announce, lottery func(room, token string) int, room, token string) {
	t.Helper()
	for what, act := range map[string]func(room, token string) int{"announcement": announce, "lottery": lottery} {
		if c := act(room, token); c != http.StatusForbidden {
			t.Errorf("%s: %s answered %d, want 403", who, what, c)
		}
	}
}

// getEntry asks the gslb at base for an entry to room with ticket: the
// status, and the answer of a 200.
func getEntry(t *testing.T, base, room, ticket string) (int, gslb.Entry) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/entry?room="+room, nil)
	req.Header.Set("Authorization", "Bearer "+ticket)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e gslb.Entry
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, e
}
