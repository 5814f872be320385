package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/ingest"
	"danmaku/internal/stream"
)

// TestModerateCommands runs `danmaku moderate` against an ingest's
// takedowns API: a takedown with flags after the arguments, its repeat, the
// list, and the refusals (a bad id, a bad kind, a missing argument, a wrong
// key).
func TestModerateCommands(t *testing.T) {
	gin.SetMode(gin.TestMode)
	const key = "moderate-cli-operator-key-0123456789"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	master := []byte("moderate-cli-master-key-0123456789-abcdef")
	secrets := auth.NewMemorySecrets()
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: master, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: master, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := center.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	streams := stream.NewMemoryStore(nil)
	srv, err := ingest.New(ingest.Config{Streams: streams, Keyring: ring, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	(&ingest.TakedownAPI{Server: srv, Keys: []string{key}, Logger: quiet}).Register(e)
	hs := httptest.NewServer(e)
	defer hs.Close()
	t.Setenv("DANMAKU_OPERATOR_KEY", key)
	cli := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runModerate(context.Background(), append(args, "-ingest", hs.URL), &out, &errOut)
		return out.String(), err
	}

	out, err := cli("takedown", "main", "1796504410123-0", "-reason", "abuse")
	if err != nil || !strings.Contains(out, "taken down in room main: barrage 1796504410123-0, by operator") {
		t.Fatalf("takedown: %q, %v", out, err)
	}
	if out, err := cli("takedown", "-kind", "2", "main", "1796504410123-0"); err != nil || !strings.Contains(out, "gift 1796504410123-0") {
		t.Fatalf("takedown of a gift: %q, %v", out, err)
	}
	if _, err := cli("takedown", "main", "1796504410123-0"); err != nil {
		t.Fatalf("repeat: %v", err)
	}
	out, err = cli("takedowns", "main")
	if err != nil || strings.Count(out, "1796504410123-0") != 2 || !strings.Contains(out, "abuse") {
		t.Fatalf("takedowns: %q, %v", out, err)
	}
	if got := len(mustEntries(t, streams, "main")); got != 2 {
		t.Fatalf("live lane holds %d takedown entries, want 2", got)
	}

	var usage usageError
	for _, args := range [][]string{
		{"takedown", "main", "12"},
		{"takedown", "main", "1-0", "-kind", "4"},
		{"takedown", "main", "1-0", "-kind", "1k"},
		{"takedown", "main"},
		{"takedown", "a.b", "1-0"},
		{"takedowns"},
		{"purge", "main"},
		{},
	} {
		if _, err := cli(args...); !errors.As(err, &usage) {
			t.Errorf("moderate %v: %v, want a usage error", args, err)
		}
	}
	t.Setenv("DANMAKU_OPERATOR_KEY", "wrong")
	if _, err := cli("takedowns", "main"); err == nil || !strings.Contains(err.Error(), "401 bad_operator_key") {
		t.Fatalf("wrong key: %v", err)
	}
}

func mustEntries(t *testing.T, s *stream.MemoryStore, room string) []stream.Entry {
	t.Helper()
	es, err := s.Read(context.Background(), stream.Key{Room: room, Lane: stream.Live}, "0", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}
