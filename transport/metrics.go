package transport

import (
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are an endpoint's Prometheus collectors; Endpoint.Collector hands
// them to the agent's registry.
type metrics struct {
	served   *prometheus.CounterVec // requests this endpoint served, by opcode and status
	calls    *prometheus.CounterVec // requests this endpoint sent, by opcode and outcome
	refused  *prometheus.CounterVec // bad input refused, by side and reason
	bytes    *prometheus.CounterVec // payload bytes, by direction
	sent     prometheus.Counter     // bytes{direction="sent"}, looked up once
	received prometheus.Counter
	conns    prometheus.Gauge       // open QUIC connections
	dials    *prometheus.CounterVec // outgoing handshakes, by result
	gossip   *prometheus.CounterVec // gossip packets, by direction and carrier
	udpBuf   *prometheus.GaugeVec   // the socket's buffers, by direction
	gro      prometheus.Gauge       // 1 when the socket receives with UDP_GRO
	largest  prometheus.Gauge       // the largest datagram received
}

func newMetrics() *metrics {
	m := &metrics{
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_served_total",
			Help: "Requests served, by opcode and response status.",
		}, []string{"op", "status"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_calls_total",
			Help: "Requests sent to peers, by opcode and outcome (a status, or unreachable).",
		}, []string{"op", "outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_refused_total",
			Help: "Connections, requests and responses refused as bad input, by side (server, client) and reason.",
		}, []string{"side", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_payload_bytes_total",
			Help: "Payload bytes moved, by direction (sent, received).",
		}, []string{"direction"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvmesh_transport_connections",
			Help: "Open QUIC connections to peers.",
		}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_dials_total",
			Help: "Outgoing QUIC handshakes, by result (ok, error).",
		}, []string{"result"}),
		gossip: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_gossip_packets_total",
			Help: "Gossip packets, by direction (sent, received, dropped) and carrier (datagram, stream).",
		}, []string{"direction", "carrier"}),
		udpBuf: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvmesh_transport_udp_buffer_bytes",
			Help: "The UDP socket's buffer sizes, by direction (receive, send); below 7 MiB, bursts may be dropped.",
		}, []string{"direction"}),
		gro: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvmesh_transport_udp_gro",
			Help: "1 when the UDP socket receives with generic receive offload (UDP_GRO), 0 otherwise.",
		}),
		largest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvmesh_transport_udp_datagram_max_bytes",
			Help: "The largest UDP datagram (QUIC packet) received and handed to quic-go so far: up to 8952 where path MTU discovery finds jumbo frames (and on loopback), under 1500 on standard Ethernet. Reported with UDP_GRO only.",
		}),
	}
	m.sent, m.received = m.bytes.WithLabelValues("sent"), m.bytes.WithLabelValues("received")
	return m
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.served, m.calls, m.refused, m.bytes, m.conns, m.dials, m.gossip, m.udpBuf, m.gro, m.largest}
}

// Describe and Collect make metrics one prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

func opLabel(op uint8) string { return strconv.Itoa(int(op)) }

// refusals logs and counts bad input. A flood of it (a misconfigured node
// retrying, a port scan) gives at most one line per reason per second, plus
// a count of the lines it held back.
type refusals struct {
	m   *metrics
	log *slog.Logger

	mu      sync.Mutex
	last    map[string]time.Time
	skipped map[string]int
}

func (r *refusals) record(side, reason, peer string, err error) {
	r.m.refused.WithLabelValues(side, reason).Inc()
	key := side + "/" + reason
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.last[key]) < time.Second {
		r.skipped[key]++
		r.mu.Unlock()
		return
	}
	r.last[key] = now
	skipped := r.skipped[key]
	r.skipped[key] = 0
	r.mu.Unlock()
	r.log.Warn("transport: refused bad input", "side", side, "reason", reason, "peer", peer, "err", err, "similar_suppressed", skipped)
}
