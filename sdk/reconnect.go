package sdk

import "time"

// reconnector is the state the edge connection keeps between connections:
// which address to dial next, the id to resume from, and the back-offs. Its
// methods decide what to do after each event and return it as an edgeStep;
// edgeLoop dials, reads, sleeps and re-joins. It is used by one goroutine.
type reconnector struct {
	last     string        // newest id received from the edge
	lastAt   time.Time     // server time the connection that gave last ended
	stuck    time.Duration // back-off of frameless resume closes
	idx      int           // the address to dial next
	backoff  time.Duration // back-off once every address has failed
	retryAt  time.Time     // the latest Retry-After of the addresses tried
	everConn bool          // a connection has been made before

	now          func() time.Time                  // the server time
	jitter       func(time.Duration) time.Duration // a random duration in [0, n); n > 0
	seenWindow   time.Duration                     // Config.SeenWindow
	rejoinJitter time.Duration                     // Config.RejoinJitter
}

// edgeStep is what edgeLoop does next: stop, or wait, then re-join or not,
// then dial again.
type edgeStep struct {
	stop   bool          // the edge is done for this client
	wait   time.Duration // on the client's clock, before anything else
	rejoin rejoinFrom
}

// rejoinFrom says which session a re-join replaces.
type rejoinFrom int

const (
	noRejoin      rejoinFrom = iota
	rejoinDialed             // the session whose addresses and token were dialed
	rejoinCurrent            // the session now: a refresh since the dial counts
)

// target returns the address to dial among addrs and the id to resume from.
// The resume point is dropped once it is older than half the seen window:
// gifts of a longer gap arrived through segments, and a replay older than
// SeenWindow would show them twice. Segments carry every gift, so starting
// fresh loses nothing.
func (r *reconnector) target(addrs []string) (addr, last string) {
	if r.idx >= len(addrs) {
		r.idx = 0
	}
	if r.last != "" && !r.lastAt.IsZero() && r.now().Sub(r.lastAt) > r.seenWindow/2 {
		r.last = ""
	}
	return addrs[r.idx], r.last
}

// tokenRefused: the edge refused the token (401); re-join for a new one and
// start again from the first address.
func (r *reconnector) tokenRefused() edgeStep {
	r.idx = 0
	return edgeStep{rejoin: rejoinDialed}
}

// dialFailed: the dial of one of n addresses failed, the edge asking to come
// back after retryAfter (0: it did not say). The next address is tried at
// once; when every one has failed they may all be gone: back off, then ask
// the gslb for fresh ones — not before the latest Retry-After, spread over
// a second past it.
func (r *reconnector) dialFailed(n int, retryAfter time.Duration) edgeStep {
	if retryAfter > 0 {
		if at := r.now().Add(retryAfter); at.After(r.retryAt) {
			r.retryAt = at
		}
	}
	r.idx++
	if r.idx < n {
		return edgeStep{}
	}
	r.idx = 0
	r.backoff = min(max(2*r.backoff, edgeBackoffMin), edgeBackoffMax)
	wait := r.backoff/2 + r.jitter(r.backoff/2+1)
	if until := r.retryAt.Sub(r.now()); until > 0 {
		wait = max(wait, until+r.jitter(time.Second))
	}
	r.retryAt = time.Time{}
	return edgeStep{wait: wait, rejoin: rejoinDialed}
}

// connected: a dial succeeded. It reports whether this is a reconnection.
func (r *reconnector) connected() (again bool) {
	r.backoff = 0
	again = r.everConn
	r.everConn = true
	return again
}

// closed: the connection ended with the edge's close code (0: none);
// progressed says whether it carried any frame.
func (r *reconnector) closed(code int, progressed bool) edgeStep {
	r.lastAt = r.now()
	switch code {
	case CloseRoomEnded, CloseBanned:
		// The segments carry the rest; a reconnect would only be refused.
		return edgeStep{stop: true}
	case CloseResume:
		// Reconnect at once to the same address; last resumes the stream.
		// A resume close before any frame means the edge could not catch
		// this client up (its store is failing): back off rather than loop
		// through handshakes.
		if progressed {
			r.stuck = 0
			return edgeStep{}
		}
		r.stuck = min(max(2*r.stuck, edgeBackoffMin), edgeBackoffMax)
		return edgeStep{wait: r.stuck/2 + r.jitter(r.stuck/2+1)}
	case CloseResumeGap:
		// Start fresh; the segments carry the gap. Spread a whole edge's
		// worth of such closes (an outage longer than the stream is kept)
		// like any reconnect.
		r.last = ""
		return edgeStep{wait: r.spread()}
	case CloseDraining, CloseTokenRejected:
		// Through a fresh entry, from its first address. The session at
		// close time, not at dial time: a token refresh in between must not
		// turn this into an immediate reconnect to the draining node's old
		// address list without jitter.
		r.idx = 0
		return edgeStep{rejoin: rejoinCurrent}
	default:
		// A dropped connection: every client of that edge reconnects now,
		// so spread them out. Nothing is lost meanwhile: last resumes the
		// stream.
		return edgeStep{wait: r.spread()}
	}
}

// spread is a random wait within RejoinJitter (none when it is zero).
func (r *reconnector) spread() time.Duration {
	if r.rejoinJitter <= 0 {
		return 0
	}
	return r.jitter(r.rejoinJitter)
}
