package mobile

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"danmaku/sdk"
)

// The end-to-end tests of this facade, against every role of the server,
// are in the server module (internal/sdke2e): this module cannot import it.

func TestNewClientConfig(t *testing.T) {
	for name, cfg := range map[string]*Config{
		"nil":              nil,
		"empty":            {},
		"bad URL":          {EntryURL: "ftp://x", Room: "r", Ticket: "t"},
		"bad room":         {EntryURL: "http://127.0.0.1:1", Room: "a room", Ticket: "t"},
		"no ticket":        {EntryURL: "http://127.0.0.1:1", Room: "r"},
		"negative visible": {EntryURL: "http://127.0.0.1:1", Room: "r", Ticket: "t", RenderVisible: -1},
		"negative display": {EntryURL: "http://127.0.0.1:1", Room: "r", Ticket: "t", RenderDisplayMs: -1},
	} {
		c, err := NewClient(cfg)
		if c != nil || ErrorCode(err) != ErrCodeConfig {
			t.Errorf("%s: NewClient = %v, %v (code %q)", name, c, err, ErrorCode(err))
		}
		if err != nil && !strings.HasPrefix(err.Error(), ErrCodeConfig+": ") {
			t.Errorf("%s: error text %q does not start with its code", name, err)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("%w: %w", sdk.ErrJoin, &sdk.APIError{Status: 401, Code: "bad_ticket"}), ErrCodeJoinRefused},
		{&sdk.APIError{Status: 403, Code: "forbidden"}, "forbidden"},
		{fmt.Errorf("sdk: announce: %w", &sdk.APIError{Status: 503, Code: "backend_unavailable"}), "backend_unavailable"},
		{sdk.ErrClosed, ErrCodeClosed},
		{context.Canceled, ErrCodeClosed},
		{sdk.ErrRunning, ErrCodeAlreadyStarted},
		{sdk.ErrEmptyText, ErrCodeEmptyText},
		{fmt.Errorf("%w: 61 characters", sdk.ErrTextTooLong), ErrCodeTextTooLong},
		{sdk.ErrNoIngest, ErrCodeNoIngest},
		{fmt.Errorf("%w: x", sdk.ErrConfig), ErrCodeConfig},
		{&url.Error{Op: "Post", URL: "http://x", Err: errors.New("connection refused")}, ErrCodeNetwork},
		{context.DeadlineExceeded, ErrCodeNetwork},
		{errors.New("something else"), ErrCodeUnknown},
		{wrap(errors.New("something else")), ErrCodeUnknown},
		{&codedError{"custom", errors.New("x")}, "custom"},
	} {
		if got := ErrorCode(tt.err); got != tt.want {
			t.Errorf("ErrorCode(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if w := wrap(tt.err); ErrorCode(w) != tt.want {
			t.Errorf("ErrorCode(wrap(%v)) = %q, want %q", tt.err, ErrorCode(w), tt.want)
		}
	}
}

// TestStatsFields keeps Stats in step with danmaku/sdk: a counter added there
// must be added here.
func TestStatsFields(t *testing.T) {
	have := map[string]bool{}
	for f := range reflect.TypeFor[Stats]().Fields() {
		if f.Type.Kind() != reflect.Int64 {
			t.Errorf("Stats.%s is %v, not int64", f.Name, f.Type)
		}
		have[f.Name] = true
	}
	for f := range reflect.TypeFor[sdk.Stats]().Fields() {
		if !have[f.Name] {
			t.Errorf("sdk.Stats.%s is missing from Stats", f.Name)
		}
	}
	for f := range reflect.TypeFor[sdk.RenderStats]().Fields() {
		if !have["Render"+f.Name] {
			t.Errorf("sdk.RenderStats.%s is missing from Stats as Render%s", f.Name, f.Name)
		}
	}
}

func TestNewMessage(t *testing.T) {
	m := newMessage(sdk.Message{ID: "5-0", Kind: sdk.KindGift, User: "u", Nick: "n", Avatar: "a", Gift: "g", Value: 7, Merged: []string{"5-0", "6-1"}, Count: 2})
	want := &Message{ID: "5-0", Kind: KindGift, User: "u", Nick: "n", Avatar: "a", Gift: "g", Value: 7, Count: 2, Merged: "5-0,6-1", MergedCount: 2}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("newMessage = %+v, want %+v", m, want)
	}
	if m := newMessage(sdk.Message{ID: "1-0", Kind: sdk.KindBarrage, Text: "x"}); m.Count != 1 || m.Merged != "" || m.MergedCount != 0 {
		t.Fatalf("single message = %+v", m)
	}
}

// A takedown notice reaches the app as KindTakedown naming its target, from
// Next when the target is on screen, and drops the target while it waits.
func TestTakedownNotice(t *testing.T) {
	if m := newMessage(sdk.Message{ID: "5-0", Kind: sdk.KindTakedown, Value: int64(sdk.KindBarrage)}); *m != (Message{ID: "5-0", Kind: KindTakedown, TargetKind: KindBarrage, Count: 1}) {
		t.Fatalf("notice = %+v", m)
	}
	c, err := NewClient(&Config{EntryURL: "http://127.0.0.1:1", Room: "r", Ticket: "t", RenderVisible: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	shown, waiting := sdk.Message{ID: "1-0", Kind: sdk.KindBarrage}, sdk.Message{ID: "2-0", Kind: sdk.KindBarrage}
	c.q.Push(shown)
	c.q.Push(waiting)
	if m := c.Next(); m == nil || m.ID != shown.ID {
		t.Fatalf("Next = %+v, want the first comment", m)
	}
	for _, m := range []sdk.Message{shown, waiting} {
		c.q.Push(sdk.Message{ID: m.ID, Kind: sdk.KindTakedown, Value: int64(m.Kind)})
	}
	if m := c.Next(); m == nil || m.Kind != KindTakedown || m.ID != shown.ID || m.TargetKind != KindBarrage {
		t.Fatalf("Next = %+v, want the shown comment's notice", m)
	}
	if m := c.Next(); m != nil {
		t.Fatalf("Next = %+v, want nothing: the waiting comment was taken down", m)
	}
	if st := c.Stats(); st.RenderRemovedShown != 1 || st.RenderRemovedWaiting != 1 {
		t.Errorf("stats = %+v", st)
	}
}
