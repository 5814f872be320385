package sdk

import (
	"runtime"
	"strings"
	"sync"
	"time"
)

// FakeClock is the tests' Clock: it moves only when told to. It is
// exported, in a test file, for the sdk_test package's tests.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
	// watch, when set, names a function (a suffix of its full name) whose
	// reads of the clock are counted in reads since the last Set or
	// Advance: a test then knows that a loop has seen the new time.
	watch string
	reads int
}

// NewFakeClock returns a FakeClock set to t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{now: t} }

// Now returns the fake time.
func (f *FakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watch != "" && calledFrom(f.watch) {
		f.reads++
	}
	return f.now
}

// Advance moves the clock forward by d.
func (f *FakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.reads = 0
	f.mu.Unlock()
}

// Set moves the clock to t.
func (f *FakeClock) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.reads = 0
	f.mu.Unlock()
}

// Watch counts, from now on, the reads made with fn (a suffix of a
// function's full name, such as ".(*Client).sendLoop") on the stack.
func (f *FakeClock) Watch(fn string) {
	f.mu.Lock()
	f.watch, f.reads = fn, 0
	f.mu.Unlock()
}

// Reads is how many times the watched function read the clock since it
// was last set: each of those reads returned the time it is set to now.
func (f *FakeClock) Reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// calledFrom reports whether a function whose name ends in fn is on the
// caller's stack.
func calledFrom(fn string) bool {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	for {
		fr, more := frames.Next()
		if strings.HasSuffix(fr.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}
