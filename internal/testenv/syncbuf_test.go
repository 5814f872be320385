package testenv

import (
	"context"
	"fmt"
	"testing"
)

func TestSyncBufferWaitFor(t *testing.T) {
	var b SyncBuffer
	found := make(chan bool, 1)
	go func() { found <- b.WaitFor(context.Background(), "ready") }()
	for i := range 3 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	fmt.Fprintln(&b, "server ready")
	if !<-found {
		t.Fatal("WaitFor missed the line")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.WaitFor(ctx, "never written") {
		t.Fatal("WaitFor found what was never written")
	}
}
