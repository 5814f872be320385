//go:build !linux

package wsbench

import "errors"

// NewEpoll needs Linux's epoll.
func NewEpoll(Options) (Server, error) { return nil, errors.New("wsbench: gobwas-epoll needs linux") }
