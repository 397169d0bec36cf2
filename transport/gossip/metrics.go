package gossip

import "github.com/prometheus/client_golang/prometheus"

// metrics are a membership's Prometheus collectors.
type metrics struct {
	events   *prometheus.CounterVec
	rejected prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_gossip_events_total",
			Help: "Membership changes seen, by kind (join, update, leave, fail).",
		}, []string{"kind"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_gossip_rejected_members_total",
			Help: "Alive messages refused because the member's metadata did not decode.",
		}),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.events.Describe(ch)
	m.rejected.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.events.Collect(ch)
	m.rejected.Collect(ch)
}
