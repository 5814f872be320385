package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"danmaku/ingest"
	"danmaku/internal/rules"
)

// TestRulesCommands runs `danmaku words` against the rules API (what an
// ingest serves) on an in-memory store: push, show, history, a refused
// list with its line, rollback, and the operator key it needs.
func TestRulesCommands(t *testing.T) {
	gin.SetMode(gin.TestMode)
	const key = "rules-cli-operator-key-0123456789"
	e := gin.New()
	(&rules.API{Store: rules.NewMemoryStore(), Kinds: map[string]rules.Check{rules.KindWords: ingest.CheckWordList, rules.KindLimits: rules.CheckLimits}, Keys: []string{key}}).Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()
	t.Setenv("DANMAKU_OPERATOR_KEY", key)
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cli := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := runRules(context.Background(), rules.KindWords, append(args, "-ingest", srv.URL), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	// push's flags come before FILE: flag parsing stops at the first
	// argument.
	push := func(path, note string) (string, error) {
		var out, errOut bytes.Buffer
		err := runRules(context.Background(), rules.KindWords, []string{"push", "-ingest", srv.URL, "-note", note, path}, &out, &errOut)
		return out.String(), err
	}
	if out, err := push(file("v1.txt", "spoiler\n"), "first"); err != nil || !strings.Contains(out, "words version 1:") {
		t.Fatalf("push v1: %q, %v", out, err)
	}
	if out, err := push(file("v2.txt", "spoiler\nleak\n"), "second"); err != nil || !strings.Contains(out, "words version 2:") {
		t.Fatalf("push v2: %q, %v", out, err)
	}
	if _, err := push(file("bad.txt", "ok\n\x01bell\n"), ""); err == nil || !strings.Contains(err.Error(), "400 bad_words: line 2") {
		t.Fatalf("a bad list: %v; want 400 bad_words naming line 2", err)
	}
	out, meta, err := cli("show")
	if err != nil || out != "spoiler\nleak\n" || !strings.Contains(meta, "version 2") {
		t.Fatalf("show = %q (%q), %v; want version 2, the bad list refused", out, meta, err)
	}
	if out, _, err := cli("show", "-version", "1"); err != nil || out != "spoiler\n" {
		t.Fatalf("show -version 1 = %q, %v", out, err)
	}
	if out, _, err := cli("rollback"); err != nil || !strings.Contains(out, "version (a rollback to 1) 3") {
		t.Fatalf("rollback = %q, %v", out, err)
	}
	out, _, err = cli("history")
	if err != nil || strings.Count(out, "\n") != 4 || !strings.Contains(out, "second") || !strings.Contains(out, "sha256:") {
		t.Fatalf("history = %q, %v; want a header and 3 versions with who and why", out, err)
	}
	if _, _, err := cli("show", "-version", "9"); err == nil || !strings.Contains(err.Error(), "404 no_version") {
		t.Fatalf("show -version 9: %v", err)
	}
	t.Setenv("DANMAKU_OPERATOR_KEY", "not-the-key")
	if _, _, err := cli("show"); err == nil || !strings.Contains(err.Error(), "401 bad_operator_key") {
		t.Fatalf("without the operator key: %v", err)
	}
	if _, _, err := cli("frobnicate"); err == nil {
		t.Fatal("an unknown subcommand was accepted")
	}
}

// TestModerationCommands runs `danmaku moderation` the same way: a strict
// document, a bad one refused whole with its field named, show, rollback
// and history.
func TestModerationCommands(t *testing.T) {
	gin.SetMode(gin.TestMode)
	const key = "rules-cli-operator-key-0123456789"
	e := gin.New()
	(&rules.API{Store: rules.NewMemoryStore(), Kinds: map[string]rules.Check{rules.KindModeration: ingest.CheckModeration}, Keys: []string{key}}).Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()
	t.Setenv("DANMAKU_OPERATOR_KEY", key)
	dir := t.TempDir()
	cli := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := runRules(context.Background(), rules.KindModeration, args, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	push := func(body string) (string, error) {
		p := filepath.Join(dir, "m.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _, err := cli("push", "-ingest", srv.URL, p)
		return out, err
	}
	v1, v2 := `{"word_policy":"mask","duplicate_window_ms":10000}`, `{"word_policy":"refuse","duplicate_window_ms":30000}`
	for i, doc := range []string{v1, v2} {
		if out, err := push(doc); err != nil || !strings.Contains(out, "moderation version "+string(rune('1'+i))+":") {
			t.Fatalf("push %d: %q, %v", i+1, out, err)
		}
	}
	for _, bad := range []struct{ doc, want string }{
		{`{"word_policy":"shout","duplicate_window_ms":10000}`, `400 bad_moderation: field "word_policy"`},
		{`{"word_policy":"mask","duplicate_window_ms":5}`, `400 bad_moderation: field "duplicate_window_ms"`},
		{`{"word_policy":"mask"}`, `400 bad_moderation: field "duplicate_window_ms": required`},
		{`{"word_policy":"mask","duplicate_window_ms":10000,"ban_days":3}`, `400 bad_json`},
		{`{"Word_Policy":"mask","duplicate_window_ms":10000}`, `400 bad_json`},
	} {
		if _, err := push(bad.doc); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("push %s: %v; want %s", bad.doc, err, bad.want)
		}
	}
	if out, meta, err := cli("show", "-ingest", srv.URL); err != nil || out != v2 || !strings.Contains(meta, "version 2") {
		t.Fatalf("show = %q (%q), %v; want version 2, the bad documents refused", out, meta, err)
	}
	if out, _, err := cli("rollback", "-ingest", srv.URL); err != nil || !strings.Contains(out, "version (a rollback to 1) 3") {
		t.Fatalf("rollback = %q, %v", out, err)
	}
	if out, _, err := cli("history", "-ingest", srv.URL); err != nil || strings.Count(out, "\n") != 4 {
		t.Fatalf("history = %q, %v", out, err)
	}
}
