package ingest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/internal/rules"
)

// A moderation document is strict and whole: both fields, known values,
// nothing else; a refusal names the field.
func TestParseModeration(t *testing.T) {
	good, err := ParseModeration([]byte(`{"word_policy":"refuse","duplicate_window_ms":30000}`))
	if err != nil || good.WordPolicy != WordsRefuse || good.DuplicateWindow != 30*time.Second {
		t.Fatalf("good document: %+v, %v", good, err)
	}
	for _, tc := range []struct{ doc, code, field string }{
		{``, "bad_json", "empty"},
		{`[]`, "bad_json", ""},
		{`{"word_policy":"mask"}`, CodeBadModeration, `"duplicate_window_ms": required`},
		{`{"duplicate_window_ms":1000}`, CodeBadModeration, `"word_policy": required`},
		{`{"word_policy":"","duplicate_window_ms":1000}`, CodeBadModeration, `"word_policy"`},
		{`{"word_policy":"shout","duplicate_window_ms":1000}`, CodeBadModeration, `"word_policy"`},
		{`{"word_policy":"mask","duplicate_window_ms":99}`, CodeBadModeration, `"duplicate_window_ms"`},
		{`{"word_policy":"mask","duplicate_window_ms":600001}`, CodeBadModeration, `"duplicate_window_ms"`},
		{`{"word_policy":"mask","duplicate_window_ms":"10s"}`, "bad_json", "duplicate_window_ms"},
		{`{"word_policy":"mask","duplicate_window_ms":1000,"extra":1}`, "bad_json", "extra"},
		{`{"word_policy":"mask","word_policy":"off","duplicate_window_ms":1000}`, "bad_json", "word_policy"},
		{`{"WORD_POLICY":"mask","duplicate_window_ms":1000}`, "bad_json", "WORD_POLICY"},
		{`{"word_policy":"mask","duplicate_window_ms":1000} {}`, "bad_json", ""},
		{"{\"word_policy\":\"m\xffsk\",\"duplicate_window_ms\":1000}", "bad_utf8", ""},
		{`{"word_policy":"mask","duplicate_window_ms":1000,"pad":"` + strings.Repeat("x", 5000) + `"}`, "body_too_large", ""},
	} {
		_, err := ParseModeration([]byte(tc.doc))
		bd, ok := errors.AsType[*rules.BadDocument](err)
		if !ok || bd.Code != tc.code || !strings.Contains(bd.Message, tc.field) {
			t.Errorf("%.60s: %v; want %s naming %s", tc.doc, err, tc.code, tc.field)
		}
	}
}

// The node's own settings (its flags) hold until a moderation document is
// pushed; then the store's head holds, a version written by other means
// that does not parse is refused and the settings in force stay.
func TestModerationFromStore(t *testing.T) {
	store := rules.NewMemoryStore()
	f := newFixture(t, func(c *Config) {
		c.Words, c.WordPolicy, c.ModerationRules = StaticWords{"spoiler"}, WordsMask, store
	})
	ctx := context.Background()
	mod := f.srv.Moderation()
	send := func(text string) int {
		return f.do(http.MethodPost, barragePath(room), f.token(t, room, "u-"+text, "viewer"), `{"text":"`+text+`"}`).Code
	}
	if v, _ := mod.Loaded(); v != 0 || mod.Current().WordPolicy != WordsMask {
		t.Fatalf("before a push: version %d, %+v", v, mod.Current())
	}
	if code := send("a spoiler 1"); code != http.StatusOK {
		t.Fatalf("masked comment: %d", code)
	}
	push := func(body string) {
		t.Helper()
		if _, err := store.Push(ctx, rules.KindModeration, []byte(body), rules.Meta{By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	push(`{"word_policy":"refuse","duplicate_window_ms":60000}`)
	_, changed := mod.Loaded()
	if err := mod.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a new version did not close Loaded's channel")
	}
	if v, _ := mod.Loaded(); v != 1 || mod.Current().DuplicateWindow != time.Minute || f.srv.dups.window.Load() != time.Minute.Milliseconds() {
		t.Fatalf("after the push: version %d, %+v, duplicates window %d ms", v, mod.Current(), f.srv.dups.window.Load())
	}
	if code := send("a spoiler 2"); code != http.StatusUnprocessableEntity {
		t.Fatalf("a listed word under the pushed refuse policy: %d, want 422", code)
	}
	// Written by other means, not a document: refused, version 1 stays.
	push(`{"word_policy":"off"}`)
	if err := mod.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "duplicate_window_ms") {
		t.Fatalf("a bad version: %v", err)
	}
	if v, _ := mod.Loaded(); v != 1 || mod.Current().WordPolicy != WordsRefuse {
		t.Fatalf("after a bad version: version %d, %+v", v, mod.Current())
	}
}
