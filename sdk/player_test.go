package sdk

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/sdk/wire"
)

// vodCDN serves a recorded room: slot second → segment.
func vodCDN(t *testing.T, segs map[int64][]Message) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		for s, msgs := range segs {
			if r.URL.Path == "/"+wire.SlotKey("vod", 1000, s) {
				_, _ = rw.Write(encodeSeg(t, segmentOf("vod", s, uint64(s), msgs...)))
				return
			}
		}
		http.NotFound(rw, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// playerRig drives a Player with a playhead the test moves and a local
// clock that moves with it (playing), or not (a seek). The player reads
// both as one pair: the clock answers what it was when the playhead was
// read, so no step sees one moved without the other.
type playerRig struct {
	mu        sync.Mutex
	ph, local int64
	seenLocal atomic.Int64
	got       chan Message
	early     []string
	stop      func() // ends Run and waits for it
}

func (r *playerRig) advance(d int64) { r.mu.Lock(); r.ph += d; r.local += d; r.mu.Unlock() }

// seek moves the playhead to ph while the local clock moves 20 ms, and
// waits for the player to have read it: moved on at once, the playhead
// would look to have jumped from where it was to where it went next.
func (r *playerRig) seek(t *testing.T, ph int64) {
	r.mu.Lock()
	r.ph = ph
	r.local += 20
	local := r.local
	r.mu.Unlock()
	eventually(t, "the player to read the seek", func() bool { return r.seenLocal.Load() == local })
}

func (r *playerRig) read() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seenLocal.Store(r.local)
	return r.ph, r.ph > 0
}

func (r *playerRig) playhead() int64 { r.mu.Lock(); defer r.mu.Unlock(); return r.ph }

func newPlayerRig(t *testing.T, cdn string, ph int64) (*playerRig, *Player) {
	t.Helper()
	r := &playerRig{got: make(chan Message, 100), ph: ph, local: 1_000_000}
	p, err := NewPlayer(context.Background(), cdn, "vod", r.read, ReplaySegmentMs(1000))
	if err != nil {
		t.Fatal(err)
	}
	p.now = func() time.Time { return time.UnixMilli(r.seenLocal.Load()) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx, func(m Message) error {
			if at := wire.PlayheadOf(&m); at > r.playhead() {
				r.mu.Lock()
				r.early = append(r.early, m.Text)
				r.mu.Unlock()
			}
			r.got <- m
			return nil
		})
	}()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(func() {
		r.stop()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range r.early {
			t.Errorf("%q played before the playhead reached it", e)
		}
	})
	return r, p
}

func (r *playerRig) expect(t *testing.T, texts ...string) {
	t.Helper()
	for _, want := range texts {
		select {
		case m := <-r.got:
			if m.Text != want {
				t.Fatalf("played %q, want %q", m.Text, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %q", want)
		}
	}
}

func (r *playerRig) none(t *testing.T) {
	t.Helper()
	select {
	case m := <-r.got:
		t.Fatalf("played %q", m.Text)
	default:
	}
}

// The recorded barrage plays at the playhead, in playhead order (not the
// order it was stored in), follows a seek back by playing again what lies
// after the new position, and a seek forward without pouring out what it
// jumped over.
func TestPlayerFollowsThePlayhead(t *testing.T) {
	const T = 1_700_000_000 // the recording's first second
	P := int64(T * 1000)
	msg := func(storedSec int64, n uint64, playhead int64, text string) Message {
		return wire.Slim(Message{ID: wire.FormatID(storedSec*1000+100, n), Kind: KindBarrage, Text: text, Playhead: playhead})
	}
	cdn := vodCDN(t, map[int64][]Message{
		// "b" was typed 1 s into the show by a viewer 20 s behind live: it is
		// stored at T+21, after "c" was; it plays before "c".
		T + 3:  {msg(T+3, 0, P+2500, "c")},
		T + 21: {msg(T+21, 0, P+1000, "b")},
		T + 30: {msg(T+30, 0, P+30_000, "d")},
		T + 61: {msg(T+61, 0, P+60_000, "e")},
		// No playhead: placed at its id's time.
		T + 62: {wire.Slim(Message{ID: wire.FormatID((T+62)*1000+100, 0), Kind: KindBarrage, Text: "f"})},
	})
	r, p := newPlayerRig(t, cdn.URL, P)
	r.advance(999)
	r.none(t)
	r.advance(1)
	r.expect(t, "b")
	r.advance(1500)
	r.expect(t, "c")
	// Seek back to the start: b and c play again.
	r.seek(t, P)
	r.none(t)
	r.advance(2600)
	r.expect(t, "b", "c")
	// Seek forward past d, to just before e.
	r.seek(t, P+59_990)
	r.advance(10)
	r.expect(t, "e")
	r.none(t)
	r.advance(2200)
	r.expect(t, "f")
	r.stop()
	if st := p.Stats(); st.Seeks != 2 || st.Played != 6 {
		t.Errorf("stats %+v, want 2 seeks and 6 played", st)
	}
}

// Without a playhead nothing plays.
func TestPlayerWithoutPlayhead(t *testing.T) {
	cdn := vodCDN(t, map[int64][]Message{1_700_000_001: {wire.Slim(Message{ID: wire.FormatID(1_700_000_001_100, 0), Kind: KindBarrage, Text: "a"})}})
	r, _ := newPlayerRig(t, cdn.URL, 0)
	r.advance(0)
	r.none(t)
	if _, err := NewPlayer(context.Background(), cdn.URL, "vod", nil); err == nil || !strings.Contains(err.Error(), "playhead") {
		t.Errorf("a player without a clock: %v", err)
	}
}
