package edge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/internal/testwait"
	"danmaku/sdk/wire"
)

// safety bounds how long a test waits for something that should happen; it
// fails the test, it never measures speed.
const safety = 30 * time.Second

type envOpts struct {
	cfg   func(*Config)
	clock clock.Clock                     // of the stream store; nil: real
	store *stream.MemoryStore             // shared with another env; nil: a new one
	wrap  func(net.Listener) net.Listener // wraps the server's listener
}

type testEnv struct {
	t     testing.TB
	store *stream.MemoryStore
	keys  *auth.Keyring
	srv   *Server
	ts    *httptest.Server
	addr  string // the advertised address
	wsURL string // the endpoint
	users atomic.Int64
}

func newEnv(t testing.TB, o envOpts) *testEnv {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	if o.wrap != nil {
		ts.Listener = o.wrap(ts.Listener)
	}
	e := &testEnv{
		t:     t,
		store: o.store,
		keys:  newKeyring(t, nil),
		ts:    ts,
		addr:  "ws://" + ts.Listener.Addr().String(),
	}
	if e.store == nil {
		e.store = stream.NewMemoryStore(o.clock)
	}
	e.wsURL = e.addr + Path
	cfg := Config{
		Store:       e.store,
		Verifier:    e.keys,
		Addr:        e.addr,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		DrainPeriod: 10 * time.Millisecond,
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), safety)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		ts.Close()
	})
	return e
}

func newKeyring(t testing.TB, clk clock.Clock) *auth.Keyring {
	t.Helper()
	ctx := context.Background()
	sec := auth.NewMemorySecrets()
	c, err := auth.NewCenter(auth.CenterConfig{Store: sec, MasterKey: make([]byte, 32), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	k, err := auth.NewKeyring(auth.KeyringConfig{Store: sec, MasterKey: make([]byte, 32), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return k
}

// signAudience signs a token of u1 in r1 whose addresses are addrs, the
// first ingests of them ingests'.
func signAudience(t testing.TB, k *auth.Keyring, ingests int, addrs ...string) string {
	t.Helper()
	tok, _, err := k.Sign(auth.Claims{
		Room: "r1", Role: auth.RoleViewer, Addrs: addrs, Ingests: ingests,
		RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testIngestAddr is the ingest address the tokens of the edge tests name
// before their edge addresses.
const testIngestAddr = "http://ingest-test"

func signToken(t testing.TB, k *auth.Keyring, room string, addrs ...string) string {
	t.Helper()
	return signTokenFor(t, k, "u1", room, addrs...)
}

func signTokenFor(t testing.TB, k *auth.Keyring, user, room string, addrs ...string) string {
	t.Helper()
	tok, _, err := k.Sign(auth.Claims{
		Room: room,
		Role: auth.RoleViewer,
		// addrs are edges: an ingest comes first, as the gslb signs them.
		Addrs:            append([]string{testIngestAddr}, addrs...),
		Ingests:          1,
		RegisteredClaims: jwt.RegisteredClaims{Subject: user},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// token signs a token for room for a user of its own: each connection of
// a test is another viewer unless it asks for a user (tokenFor).
func (e *testEnv) token(room string) string {
	return e.tokenFor(fmt.Sprintf("u%d", e.users.Add(1)), room)
}

func (e *testEnv) tokenFor(user, room string) string {
	return signTokenFor(e.t, e.keys, user, room, "ws://other:1", e.addr)
}

func (e *testEnv) dialWith(d *websocket.Dialer, tok, last string) (*websocket.Conn, *http.Response, error) {
	u := e.wsURL
	if last != "" {
		u += "?last=" + url.QueryEscape(last)
	}
	return d.Dial(u, http.Header{"Authorization": {"Bearer " + tok}})
}

// connect opens a connection to room, resuming after last when it is set.
func (e *testEnv) connect(room, last string) *websocket.Conn {
	e.t.Helper()
	ws, resp, err := e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, e.token(room), last)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		e.t.Fatalf("dial %s: %v (status %d)", room, err, status)
	}
	e.t.Cleanup(func() { ws.Close() })
	return ws
}

func (e *testEnv) append(room string, msgs ...wire.Message) []wire.Message {
	e.t.Helper()
	out, err := e.store.Append(context.Background(), stream.Key{Room: room, Lane: stream.Live}, msgs)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func gift(value int64, count uint32) wire.Message {
	return wire.Message{Kind: wire.KindGift, User: "u9", Nick: "a-long-nickname", Gift: "rose", Value: value, Count: count, Order: "o-1"}
}

func sys(text string) wire.Message {
	return wire.Message{Kind: wire.KindSystem, Role: "host", Text: text}
}

func ids(ms []wire.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// readUntil reads frames until stop says so, returning every message read.
func readUntil(ws *websocket.Conn, room string, stop func([]wire.Message) bool) ([]wire.Message, error) {
	var got []wire.Message
	for !stop(got) {
		_ = ws.SetReadDeadline(time.Now().Add(safety))
		typ, b, err := ws.ReadMessage()
		if err != nil {
			return got, err
		}
		if typ != websocket.BinaryMessage {
			return got, fmt.Errorf("frame type %d, want binary", typ)
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			return got, err
		}
		if f.Room != room || f.V != wire.Version || len(f.Messages) == 0 {
			return got, fmt.Errorf("bad frame header: room %q v %d with %d messages", f.Room, f.V, len(f.Messages))
		}
		got = append(got, f.Messages...)
	}
	return got, nil
}

// untilID stops once a message with id has been read.
func untilID(id string) func([]wire.Message) bool {
	return func(ms []wire.Message) bool {
		return len(ms) > 0 && wire.CompareIDs(ms[len(ms)-1].ID, id) >= 0
	}
}

func sameIDs(t testing.TB, who string, got []wire.Message, want []string) {
	t.Helper()
	if g := ids(got); !slices.Equal(g, want) {
		t.Fatalf("%s: got %d messages %v\nwant %d %v", who, len(g), g, len(want), want)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, cond)
}

// counter reads a counter's value.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
