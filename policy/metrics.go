package policy

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts, per slot, the calls into policy modules, the calls that
// failed (by reason: trap, deadline, memory, answer) and the fallbacks to
// the native policy that followed. Register it with a prometheus registry.
type Metrics struct {
	calls     *prometheus.CounterVec
	failures  *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
}

// NewMetrics returns zeroed counters.
func NewMetrics() *Metrics {
	return &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvmesh", Subsystem: "policy", Name: "calls_total",
			Help: "Calls into policy modules (one per batch), by slot.",
		}, []string{"slot"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvmesh", Subsystem: "policy", Name: "failures_total",
			Help: "Policy module calls that trapped, overran their deadline, ran out of memory or answered nonsense, by slot and reason.",
		}, []string{"slot", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvmesh", Subsystem: "policy", Name: "fallbacks_total",
			Help: "Policy modules taken out of service, their slot falling back to the native policy, by slot.",
		}, []string{"slot"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.calls.Describe(ch)
	m.failures.Describe(ch)
	m.fallbacks.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.calls.Collect(ch)
	m.failures.Collect(ch)
	m.fallbacks.Collect(ch)
}

// slotLabel names a binding in metrics: the slot, and the tier for
// eviction.
func slotLabel(s Slot, t Tier) string {
	if s == SlotEviction {
		return "eviction_" + t.String()
	}
	return s.String()
}
