package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A port handed to a server the test starts is free when it is picked and
// taken only when the server binds it: between the two anything may take
// it. Port 0's choice comes from the kernel's ephemeral range, the range
// every outgoing connection's source port comes from too, so on a busy
// machine (a whole -race suite beside a CPU hog: hundreds of connections
// a second) a port picked that way was taken by someone's connection
// before a role bound it ("address already in use", TestFaultTableQuick).
// Picked below the ephemeral range, only another listener can take it, and
// those are the tests' own, each picking at random among thousands.

const (
	// portLow is the lowest port picked: above the well-known and most
	// registered services' ports.
	portLow = 10_000
	// portPicks is how many random ports are tried before falling back
	// to the kernel's choice.
	portPicks = 64
)

// ephemeralLow is the bottom of the kernel's ephemeral port range, read
// once (0: unknown).
var ephemeralLow = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
})

// listenFree listens on a loopback port below the ephemeral range, or on
// the kernel's choice where there is no room below it.
func listenFree() (net.Listener, error) {
	if hi := ephemeralLow(); hi-portLow >= 1_000 {
		for range portPicks {
			port := portLow + rand.IntN(hi-portLow)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago, below the kernel's ephemeral range (held open together, so no two
// are the same).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := listenFree()
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort is one of FreePorts; a failure fails t.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := FreePorts(1)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p[0]
}

// FreeAddr is FreePort as a "127.0.0.1:PORT" address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}
