package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePorts: the ports are distinct, bindable, and below the kernel's
// ephemeral range where it leaves room, so no outgoing connection's
// source port takes one before its server binds it.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice in one call", p)
		}
		seen[p] = true
		if lo := ephemeralLow(); lo-portLow >= 1_000 && (p < portLow || p >= lo) {
			t.Errorf("port %d outside [%d, %d): the ephemeral range starts at %d", p, portLow, lo, lo)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not free after the call: %v", p, err)
		}
		l.Close()
	}
	if a := FreeAddr(t); a == "" {
		t.Fatal("no address")
	}
}
