// Package sysload measures what the gslb needs to know of a node's CPU:
// the process's own use and the whole machine's, each as a fraction of
// the machine's cores, averaged since the previous sample. Reading them
// costs two small /proc reads, so a Sampler reads at most once per Every
// and answers the cached values in between: the load reporter asks every
// few milliseconds.
package sysload

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Sampler answers the CPU fractions, refreshed at most every Every.
// Safe for concurrent use. The zero value is not usable; use New.
type Sampler struct {
	every time.Duration
	now   func() time.Time

	mu       sync.Mutex
	at       time.Time     // last sample
	procCPU  time.Duration // process CPU time at the last sample
	busy     uint64        // machine busy jiffies at the last sample
	total    uint64        // machine total jiffies at the last sample
	proc     float64
	machine  float64
	haveProc bool
}

// New returns a Sampler that re-reads at most every every (zero: 100 ms).
func New(every time.Duration) *Sampler {
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	s := &Sampler{every: every, now: time.Now}
	s.sample(s.now()) // the baseline; the first answer covers the time since
	return s
}

// CPU returns the process's and the machine's CPU use, 0..1 of all cores,
// over the last sampling period. The machine figure is 0 where /proc/stat
// cannot be read (not Linux); the process figure comes from getrusage.
func (s *Sampler) CPU() (process, machine float64) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.at) >= s.every {
		s.sample(now)
	}
	return s.proc, s.machine
}

// Max is the larger of the two: how loaded the machine a node runs on is,
// its own work or a neighbour's.
func (s *Sampler) Max() float64 {
	p, m := s.CPU()
	return max(p, m)
}

// Process is the process's own share. A node reports it as its CPU: the
// allocator stops handing out a node past its CPU bound, and a busy
// neighbour (another tenant, a build, the tests beside a dev process)
// must not take every node of a machine out of the rotation at once.
func (s *Sampler) Process() float64 {
	p, _ := s.CPU()
	return p
}

func (s *Sampler) sample(now time.Time) {
	cpu, okP := processCPU()
	busy, total, okM := machineJiffies()
	if !s.at.IsZero() {
		if el := now.Sub(s.at); okP && s.haveProc && el > 0 {
			s.proc = clamp(float64(cpu-s.procCPU) / float64(el) / float64(runtime.NumCPU()))
		}
		if okM && total > s.total {
			s.machine = clamp(float64(busy-s.busy) / float64(total-s.total))
		}
	}
	s.at, s.procCPU, s.haveProc = now, cpu, okP
	if okM {
		s.busy, s.total = busy, total
	}
}

func clamp(f float64) float64 { return min(max(f, 0), 1) }

// ProcessTime is the process's user + system CPU time so far; 0 where it
// cannot be read. Benchmarks divide its growth by the work done.
func ProcessTime() time.Duration {
	d, _ := processCPU()
	return d
}

// ResidentBytes is the process's resident set (VmRSS of /proc/self/status);
// 0 where there is none to read.
func ResidentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// processCPU is the process's user + system CPU time so far.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// machineJiffies reads the first line of /proc/stat: busy and total
// jiffies of all cores (idle and iowait are not busy).
func machineJiffies() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	busy, total, err = parseStat(b)
	return busy, total, err == nil
}

var errStat = errors.New("sysload: unexpected /proc/stat")

// parseStat parses "cpu  user nice system idle iowait irq softirq steal ...".
func parseStat(b []byte) (busy, total uint64, err error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, 0, errStat
	}
	for i, v := range f[1:] {
		if i >= 8 { // guest times are already counted in user and nice
			break
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, 0, errStat
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}
