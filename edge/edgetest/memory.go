package edgetest

import (
	"runtime"
	"runtime/debug"

	"danmaku/internal/sysload"
)

// MemSample is what a process holds: resident set, heap and stacks in use,
// goroutines.
type MemSample struct{ RSS, HeapStack, Goroutines int64 }

// SampleMemory collects garbage and returns freed pages to the OS first,
// so that RSS counts what is held, not what the scavenger has not returned
// yet. The edge's benchmarks divide the growth between two
// samples by the connections held.
func SampleMemory() MemSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return MemSample{RSS: sysload.ResidentBytes(), HeapStack: int64(ms.HeapInuse + ms.StackInuse), Goroutines: int64(runtime.NumGoroutine())}
}
