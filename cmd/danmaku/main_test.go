package main

import (
	"os"
	"testing"

	"danmaku/internal/testenv"
)

// danmakuBuild is this command, built once per test run; tests run it as a
// newcomer or an operator would.
var danmakuBuild = &testenv.Build{Pkg: "danmaku/cmd/danmaku"}

func binary(t *testing.T) string {
	t.Helper()
	return danmakuBuild.Path(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	danmakuBuild.Remove()
	os.Exit(code)
}
