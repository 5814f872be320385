package rules_test

import (
	"testing"

	"danmaku/internal/testenv"
)

// TestMain stops the Redis Cluster the package's tests share.
func TestMain(m *testing.M) { testenv.Main(m) }
