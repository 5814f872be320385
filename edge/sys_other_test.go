//go:build !unix

package edge

import (
	"syscall"
	"time"
)

// smallRcvBuf leaves the buffer alone where setsockopt takes other types;
// the slow-client test then needs more messages, nothing else changes.
func smallRcvBuf(network, address string, c syscall.RawConn) error { return nil }

// cpuTime is unknown here; benchmarks then report 0 CPU per delivery.
func cpuTime() time.Duration { return 0 }
