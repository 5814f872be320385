package breaker

import "github.com/prometheus/client_golang/prometheus"

// The metrics are the process's, like its breakers: one series per
// dependency and target, whichever client or component made the breaker.
var (
	stateGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "danmaku_breaker_state",
		Help: "Circuit breaker state by dependency and target: 0 closed, 1 half-open (probing), 2 open (calls fail fast; the component serves its fallback).",
	}, []string{"dep", "target"})
	transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_breaker_transitions_total",
		Help: "Circuit breaker state changes by dependency and the state changed to (open, half-open, closed).",
	}, []string{"dep", "to"})
)

// collector brings the state gauge up to date before it is read: gobreaker
// moves an open breaker to half-open only when it is next asked, and a
// breaker nobody calls would otherwise read open for good.
type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	stateGauge.Describe(ch)
	transitions.Describe(ch)
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	registry.Lock()
	bs := make([]*Breaker, 0, len(registry.m))
	for _, b := range registry.m {
		bs = append(bs, b)
	}
	registry.Unlock()
	for _, b := range bs {
		b.State()
	}
	stateGauge.Collect(ch)
	transitions.Collect(ch)
}

// Collectors returns the breakers' metrics, for the process's registry
// (register them once).
func Collectors() []prometheus.Collector { return []prometheus.Collector{collector{}} }
