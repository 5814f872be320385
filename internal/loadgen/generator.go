package loadgen

import (
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// GeneratorReport is the generator's own health over the offer and the
// drain: how much CPU its processes took and how late their timers fired.
// A run the generator could not keep up with measured the generator, not
// the servers: GeneratorBound says so, and the HTML verdict then calls the
// run inconclusive rather than the servers' pass or fail.
type GeneratorReport struct {
	// Procs is how many processes played the run (1, or the shards merged).
	Procs int `json:"procs"`
	// MachineCores is the cores of the machine the generator ran on.
	MachineCores int `json:"machine_cores" merge:"first"`
	// WindowSeconds is how long the measure lasted (offer and drain).
	WindowSeconds float64 `json:"window_s" merge:"max"`
	// CPUSeconds is the generator processes' CPU time (user and system)
	// over the window, all processes together; CPUCores the same over the
	// window: the cores they kept busy.
	CPUSeconds float64 `json:"cpu_s"`
	CPUCores   float64 `json:"cpu_cores" merge:"derived"`
}

// The thresholds past which the generator, not the servers, bound a run.
const (
	// genCPUShare: the generator's processes kept this share of the
	// machine's cores busy: what is left cannot both serve and load.
	genCPUShare = 0.8
	// genLagP99: a timer asked to fire every genLagEvery fired this late
	// at p99: the processes were runnable and not run (the machine's
	// CPU), so pollers polled and pacers sent late.
	genLagP99 = 50 * time.Millisecond
	// genSendDelayP99: comments were taken up by a worker this long after
	// their schedule at p99.
	genSendDelayP99 = 100 * time.Millisecond
	// genLagEvery is the lag probe's period.
	genLagEvery = 10 * time.Millisecond
)

// GeneratorBound says why the generator itself was the bottleneck of the
// run, one reason a line; nil when it kept its schedule. A generator-bound
// run's latencies and rates are the generator's, not the servers'.
func (r *Report) GeneratorBound() []string {
	var why []string
	g := &r.Generator
	if g.MachineCores > 0 && g.CPUCores >= genCPUShare*float64(g.MachineCores) {
		why = append(why, fmt.Sprintf("its %d process(es) kept %.2f of the machine's %d cores busy (≥ %.0f %%)", g.Procs, g.CPUCores, g.MachineCores, 100*genCPUShare))
	}
	if l := r.Latency.GeneratorLag; l.Count > 0 && l.P99Ms > ms(genLagP99) {
		why = append(why, fmt.Sprintf("its timers fired p99 %.0f ms late (max %.0f ms; above %.0f ms): runnable but not run", l.P99Ms, l.MaxMs, ms(genLagP99)))
	}
	if s := r.Latency.SendDelay; s.Count > 0 && s.P99Ms > ms(genSendDelayP99) {
		why = append(why, fmt.Sprintf("comments were taken up p99 %.0f ms after their schedule (above %.0f ms)", s.P99Ms, ms(genSendDelayP99)))
	}
	return why
}

// cpuTime is this process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfMeter measures the generator process from start to stop.
type selfMeter struct {
	start time.Time
	cpu   time.Duration
	done  chan struct{}
	ended chan struct{}
}

// startSelfMeter starts the measure and the lag probe, which records into
// lag how late a timer of genLagEvery fires.
func startSelfMeter(lag *Histogram) *selfMeter {
	m := &selfMeter{start: time.Now(), cpu: cpuTime(), done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(m.ended)
		t := time.NewTimer(genLagEvery)
		defer t.Stop()
		due := time.Now().Add(genLagEvery)
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				lag.Observe(max(time.Since(due), 0))
				due = time.Now().Add(genLagEvery)
				t.Reset(genLagEvery)
			}
		}
	}()
	return m
}

// stop ends the measure and fills r.
func (m *selfMeter) stop(r *GeneratorReport) {
	close(m.done)
	<-m.ended
	*r = GeneratorReport{Procs: 1, MachineCores: runtime.NumCPU(), WindowSeconds: time.Since(m.start).Seconds(), CPUSeconds: (cpuTime() - m.cpu).Seconds()}
	r.derive()
}

func (r *GeneratorReport) derive() {
	r.CPUCores = r.CPUSeconds / max(r.WindowSeconds, 1e-3)
}
