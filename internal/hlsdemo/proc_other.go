//go:build !linux

package hlsdemo

import "os/exec"

// dieWithParent: elsewhere a killed dev leaves ffmpeg to be stopped by hand.
func dieWithParent(*exec.Cmd) {}
