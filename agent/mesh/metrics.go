package mesh

import "github.com/prometheus/client_golang/prometheus"

// metrics counts the remote tier's work as this node sees it.
type metrics struct {
	remote   *prometheus.CounterVec // requests this node sent, by op and outcome
	replicas *prometheus.CounterVec // replica writes by how they ended
	pushed   prometheus.Counter     // blocks copied by hand-off or repair
	dropped  prometheus.Counter     // background pushes dropped: queue full
	extra    *prometheus.CounterVec // copies written to owners beyond R, by path and outcome
}

func newMetrics() *metrics {
	return &metrics{
		remote: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_mesh_remote_requests_total",
			Help: "Requests sent to other members, by op and outcome (ok or the failure status)."}, []string{"op", "outcome"}),
		replicas: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_mesh_replicated_puts_total",
			Help: "Puts with durability replicated, by outcome (acked, short)."}, []string{"outcome"}),
		pushed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvmesh_mesh_pushed_blocks_total",
			Help: "Blocks copied to their owners by hand-off on leave or repair after a membership change."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvmesh_mesh_push_dropped_total",
			Help: "Background copies to owners dropped because the queue was full (the block stays local)."}),
		extra: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_mesh_extra_replicas_total",
			Help: "Copies written to owners beyond the first R because the admission policy asked for more replicas, by path (put: a replicated put; background: the copy after a put; repair: repair or hand-off) and outcome (ok, failed)."}, []string{"path", "outcome"}),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.remote.Describe(ch)
	m.replicas.Describe(ch)
	m.pushed.Describe(ch)
	m.dropped.Describe(ch)
	m.extra.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.remote.Collect(ch)
	m.replicas.Collect(ch)
	m.pushed.Collect(ch)
	m.dropped.Collect(ch)
	m.extra.Collect(ch)
}
