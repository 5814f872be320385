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
