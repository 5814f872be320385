package edge

import (
	"fmt"
	"sync"

	"github.com/gobwas/ws"
)

// helloWait is a browser's upgraded socket waiting for its first frame,
// the hello, which carries its token. Where an epoll loop can own the
// socket (Linux, plain TCP: pollHello) it waits there as lean as an idle
// connection — no goroutine, no buffer, a place in its loop's list of
// waits, whose deadlines the loop checks on the server's Clock — and only
// a hello of the right shape is handed to a goroutine, which verifies the
// token and admits it (admitHello). Elsewhere (TLS) serveHello reads it
// on net/http's goroutine. Either way the wait holds the connection's
// slot and its place among the node's and its address's hello waits
// (helloWaits), freed when the wait ends.
type helloWait struct {
	s    *Server
	addr string // its count among the address's waits
	// last is the query's last id, replaced by the hello's.
	last    msgID
	hasLast bool
	hl      hello // the hello, once parsed

	loopWait // the epoll loop's side (pollHello), where there is one

	mu    sync.Mutex
	state uint8 // waitOpen, waitRefused, waitHandedOff, waitDone
}

// States of a helloWait.
const (
	waitOpen      = iota
	waitRefused   // a close frame went out; the socket closes
	waitHandedOff // the hello came: the socket left the loop
	waitDone      // the socket closed in the loop; slot and wait freed
)

// parse takes a whole first message as the hello: a text frame holding
// {"token": ..., "last": ...}; nil, or the refusal to close with.
func (w *helloWait) parse(f clientFrame) *refusal {
	hl, err := parseHello(f.payload)
	if err == nil && (f.op != ws.OpText || !f.fin) {
		err = fmt.Errorf("%w: not a text frame", errBadHello)
	}
	last, hasLast := w.last, w.hasLast
	if err == nil && hl.Last != "" {
		last, hasLast, err = parseLast(hl.Last)
	}
	if err != nil {
		return refuseBadHello
	}
	w.hl, w.last, w.hasLast = hl, last, hasLast
	return nil
}
