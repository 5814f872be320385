//go:build race

package edge

// raceEnabled: the race detector is on; load tests size themselves down.
const raceEnabled = true
