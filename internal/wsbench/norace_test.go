//go:build !race

package wsbench

const raceEnabled = false
