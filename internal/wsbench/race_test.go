//go:build race

package wsbench

// nbio hands sockets from its accept goroutine to its poller goroutines
// through epoll, which the race detector cannot see (and marks its own
// code //go:norace): it reports races inside nbhttp. Its tests are skipped
// under -race.
const raceEnabled = true
