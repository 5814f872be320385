package event

// OtherLabel is the event and room label value of every room no event in
// the directory names: metrics labelled by room get at most one series per
// room an event defines, plus this one, whatever rooms clients name.
const OtherLabel = "other"

// MetricLabels returns the event and room label values of room for a
// metric: room's current event (as Lookup chooses it) and room itself when
// an event names it, else OtherLabel twice. It is the only way a role turns
// a client-named room into a label value, so a room label is bounded by the
// events an operator created (issue 19, metric hygiene). A nil Directory
// (a role run without events) names no room.
func (d *Directory) MetricLabels(room string) (eventID, roomID string) {
	if d == nil {
		return OtherLabel, OtherLabel
	}
	v, ok := d.Lookup(room)
	if !ok {
		return OtherLabel, OtherLabel
	}
	return v.Event.ID, room
}
