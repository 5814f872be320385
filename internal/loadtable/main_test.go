package loadtable_test

import (
	"testing"

	"danmaku/internal/testenv"
)

// TestMain stops the Redis Cluster the package's tests share
// (redistest.Cluster) once they are done.
func TestMain(m *testing.M) { testenv.Main(m) }
