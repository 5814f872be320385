//go:build !linux

package edge

import "net"

// poller is Linux's epoll; elsewhere every socket is a goSock.
type poller struct{}

func newPoller() (*poller, error)                  { return &poller{}, nil }
func (p *poller) stop()                            {}
func (p *poller) add(net.Conn, []byte, *conn) sock { return nil }

// maxLoops: no epoll loops here.
const maxLoops = 0
