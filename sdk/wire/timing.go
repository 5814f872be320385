package wire

// DefaultPublishDelayMs is how long after a segment ends, by the store
// clock, it is due at the CDN: the slicer writes it as soon as the store
// clock passes its end (stream ids come from that clock and only grow, so
// nothing can still join it), and clients ask for it only this much later.
// It covers the slicer's wake-up, one read of the streams, the encode and
// the PUT, with room for a busy machine (docs/architecture.md, "Publish
// delay", has the measurements). Too short, and first polls miss (404, and
// a CDN may cache the 404); too long, and every comment waits for nothing.
const DefaultPublishDelayMs = 50

// Timing is a room's segment schedule: the one definition the slicer (when
// a slot is complete, when it is late) and every client (when to ask for a
// slot) share. Times are unix ms on the store clock.
type Timing struct {
	// SegmentMs is the segment duration (ValidSegmentMs).
	SegmentMs int64
	// PublishDelayMs is how long after its end a slot is due at the CDN.
	PublishDelayMs int64
}

// SlotOf returns the slot holding unix ms t.
func (t Timing) SlotOf(ms int64) int64 { return floorDiv(ms, t.SegmentMs) }

// End returns the unix ms at which slot ends: once the store clock has
// passed it, no new message can belong to the slot.
func (t Timing) End(slot int64) int64 { return (slot + 1) * t.SegmentMs }

// Due returns the unix ms from which slot may be asked for at the CDN.
func (t Timing) Due(slot int64) int64 { return t.End(slot) + t.PublishDelayMs }

// LiveSlot returns the newest slot that is due at unix ms now.
func (t Timing) LiveSlot(now int64) int64 { return t.SlotOf(now-t.PublishDelayMs) - 1 }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// SlotOfID returns the slot of duration dur ms that message id belongs to.
func SlotOfID(id string, dur int64) (int64, error) {
	ms, _, err := ParseID(id)
	if err != nil {
		return 0, err
	}
	return ms / dur, nil
}
