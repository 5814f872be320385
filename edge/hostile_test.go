package edge

import (
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/wire"
)

// Hostile input the edge gets from outside, one test per kind; the
// catalogue in docs/reliability.md ("Hostile input: what each gets")
// names them.

// TestTokenInURLAnyCase: a query parameter is a token in the URL whatever
// the case of its name, refused before anything else is read.
func TestTokenInURLAnyCase(t *testing.T) {
	e := newEnv(t, envOpts{})
	good := e.token("r1")
	for _, name := range []string{"token", "Token", "TOKEN", "tOkEn"} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest("GET", e.ts.URL+Path+"?"+name+"=SECRET", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = http.Header{
				"Authorization": {"Bearer " + good},
				"Connection":    {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			checkCoded(t, resp, http.StatusBadRequest, CodeTokenInURL)
		})
	}
}

// TestLastAheadClosed: a last id further ahead than the room can have
// written is closed with CloseResumeGap (reconnect without last) instead of
// withholding every message up to it, by header and by hello; one a little
// ahead is honoured (TestResumeAhead).
func TestLastAheadClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	newest := e.append("r1", sys("newest"))[0]
	ms, _, err := wire.ParseID(newest.ID)
	if err != nil {
		t.Fatal(err)
	}
	far := wire.FormatID(max(ms, time.Now().UnixMilli())+time.Hour.Milliseconds(), 0)
	t.Run("header", func(t *testing.T) {
		ws, _, err := e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, e.token("r1"), far)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		if got := closeCode(t, ws); got != CloseResumeGap {
			t.Fatalf("close code %d, want %d", got, CloseResumeGap)
		}
	})
	t.Run("hello", func(t *testing.T) {
		ws, _, err := e.dialBrowser("")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		if err := text(`{"token":"` + e.token("r1") + `","last":"` + far + `"}`)(ws); err != nil {
			t.Fatal(err)
		}
		if got := closeCode(t, ws); got != CloseResumeGap {
			t.Fatalf("close code %d, want %d", got, CloseResumeGap)
		}
	})
	waitFor(t, "both closes counted", func() bool {
		return counter(e.srv.m.closes.WithLabelValues(reasonGap)) == 2 && e.srv.Load().Conns == 0
	})
	if n := e.srv.OnlineRooms()["r1"]; n != 0 {
		t.Fatalf("%d viewers online after both were closed", n)
	}
}
