package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// defaultFastLaneCap is how many fast-lane messages a room displays per
// second: the published "reservoir" practice (DESIGN.md, layer 4).
const defaultFastLaneCap = 30

// FastLane is the fourth layer of the upload path: host and admin
// announcements and interactive commands (lottery entries) skip the room
// and user buckets, and are displayed under a hard cap of capPerSec per
// room and second, global across ingest nodes. Announcements and lottery
// entries share one room's cap, whatever lane they go to.
//
// The cap is counted per second of the store's clock (Redis's TIME on
// Redis), the clock that stamps the entries, so what one second shows is
// what the slicer finds stamped in it. Implementations are safe for
// concurrent use.
type FastLane interface {
	// Show appends m to room's lane if the room's count of the current
	// second is below capPerSec, counting it, in one atomic step. Over the
	// cap nothing is appended: the answer's ID is "" and RetryAfter says
	// when the next second opens. An error leaves open whether m was
	// appended (a timeout after Redis ran the step).
	Show(ctx context.Context, room string, lane stream.Lane, m wire.Message, capPerSec int) (Shown, error)
}

// Shown is what FastLane.Show did.
type Shown struct {
	// ID is the entry id of the appended message; "" when the room's cap
	// for this second was reached and nothing was appended.
	ID string
	// RetryAfter is, when nothing was appended, how long until the room's
	// next second (at most a second): the Retry-After of a 429.
	RetryAfter time.Duration
}

// OK reports whether the message was appended.
func (s Shown) OK() bool { return s.ID != "" }

// ErrBadShow is returned (wrapped) by Show for a call it cannot take: an
// invalid room, an unknown lane or a cap below 1. Nothing is appended.
var ErrBadShow = errors.New("ingest: bad fast-lane message")

// maxFastLaneCap bounds capPerSec: the fast lane is for the few messages a
// viewer can read in a second, not a second barrage path.
const maxFastLaneCap = 10_000

func checkShow(room string, lane stream.Lane, capPerSec int) error {
	switch {
	case !wire.ValidRoom(room):
		return fmt.Errorf("%w: room %q", ErrBadShow, room)
	case lane != stream.Barrage && lane != stream.Live:
		return fmt.Errorf("%w: lane %d", ErrBadShow, lane)
	case capPerSec < 1 || capPerSec > maxFastLaneCap:
		return fmt.Errorf("%w: cap %d per second: 1-%d", ErrBadShow, capPerSec, maxFastLaneCap)
	}
	return nil
}

// untilNextSecond is the wait from t to the next whole second.
func untilNextSecond(t time.Time) time.Duration {
	return time.Second - time.Duration(t.Nanosecond())
}
