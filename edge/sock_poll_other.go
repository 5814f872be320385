//go:build !linux

package edge

import (
	"bufio"
	"net"
	"time"
)

// poller is Linux's epoll; elsewhere every socket is a goSock.
type poller struct{}

func newPoller(func() time.Time, time.Duration) (*poller, error) { return &poller{}, nil }
func (p *poller) stop()                                          {}
func (p *poller) add(net.Conn, []byte, sockOwner) sock           { return nil }

// maxLoops: no epoll loops here.
const maxLoops = 0

// loopWait: no loop holds a hello wait here.
type loopWait struct{}

// pollHello: every socket waits for its hello on a goroutine here.
func (s *Server) pollHello(net.Conn, *bufio.Reader, *helloWait) bool { return false }
