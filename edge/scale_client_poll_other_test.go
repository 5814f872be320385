//go:build !linux

package edge

import "net"

// scalePoller is Linux's epoll; elsewhere the load client reads with a
// goroutine per connection.
type scalePoller struct{}

func newScalePoller() *scalePoller { return nil }

func (p *scalePoller) add(net.Conn, []byte, *scaleConn) error { return nil }
