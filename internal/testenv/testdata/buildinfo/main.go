// Command buildinfo prints what TestBuild built it with.
package main

import (
	"fmt"
	"runtime/debug"
)

func main() {
	cgo := "?"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "CGO_ENABLED" {
				cgo = s.Value
			}
		}
	}
	fmt.Printf("%s cgo=%s\n", tag, cgo)
}
