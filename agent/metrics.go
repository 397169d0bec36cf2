package agent

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/kvmesh/kvmesh/agent/store"
)

// metrics exports the store's statistics, read at scrape time, and the
// latency of every local API operation.
type metrics struct {
	store   *store.Store
	latency *prometheus.HistogramVec

	tierBytes, tierCapacity, tierBlocks, hits, misses, evictions *prometheus.Desc
	corrupt, demotions, prefetched, diskWriteErrs, pinned        *prometheus.Desc
}

func newMetrics(st *store.Store) *metrics {
	tier := []string{"tier"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("kvmesh_"+name, help, labels, nil)
	}
	return &metrics{
		store: st,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvmesh_op_duration_seconds",
			Help:    "Latency of local API operations.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10), // 10 µs … 2.6 s
		}, []string{"op", "code"}),
		tierBytes:     d("tier_used_bytes", "Bytes a tier holds.", tier),
		tierCapacity:  d("tier_capacity_bytes", "Bytes a tier may hold.", tier),
		tierBlocks:    d("tier_blocks", "Blocks a tier holds.", tier),
		hits:          d("hits_total", "Reads served by a tier.", tier),
		misses:        d("misses_total", "Reads a tier could not serve.", tier),
		evictions:     d("evictions_total", "Blocks evicted from a tier.", tier),
		corrupt:       d("corrupt_blocks_total", "Blocks dropped for a failed checksum.", nil),
		demotions:     d("demotions_total", "Blocks moved from memory to disk on eviction.", nil),
		prefetched:    d("prefetched_total", "Blocks warmed from disk into memory.", nil),
		diskWriteErrs: d("disk_write_errors_total", "Failed writes of block files.", nil),
		pinned:        d("pinned_blocks", "Blocks pinned against eviction.", nil),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.latency.Describe(ch)
	for _, d := range []*prometheus.Desc{m.tierBytes, m.tierCapacity, m.tierBlocks, m.hits, m.misses,
		m.evictions, m.corrupt, m.demotions, m.prefetched, m.diskWriteErrs, m.pinned} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	st := m.store.Stat()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	for _, t := range st.Tiers {
		ch <- prometheus.MustNewConstMetric(m.tierBytes, gauge, float64(t.UsedBytes), t.Tier)
		ch <- prometheus.MustNewConstMetric(m.tierCapacity, gauge, float64(t.CapacityBytes), t.Tier)
		ch <- prometheus.MustNewConstMetric(m.tierBlocks, gauge, float64(t.Blocks), t.Tier)
		ch <- prometheus.MustNewConstMetric(m.hits, counter, float64(t.Hits), t.Tier)
		ch <- prometheus.MustNewConstMetric(m.misses, counter, float64(t.Misses), t.Tier)
		ch <- prometheus.MustNewConstMetric(m.evictions, counter, float64(t.Evictions), t.Tier)
	}
	ch <- prometheus.MustNewConstMetric(m.corrupt, counter, float64(st.CorruptDropped))
	ch <- prometheus.MustNewConstMetric(m.demotions, counter, float64(st.Demotions))
	ch <- prometheus.MustNewConstMetric(m.prefetched, counter, float64(st.Prefetched))
	ch <- prometheus.MustNewConstMetric(m.diskWriteErrs, counter, float64(st.DiskWriteErrs))
	ch <- prometheus.MustNewConstMetric(m.pinned, gauge, float64(st.Pinned))
}

// observeOp is a gRPC interceptor timing each call by method and status.
func (m *metrics) observeOp(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	code := "OK"
	if err != nil {
		code = "ERROR"
	}
	m.latency.WithLabelValues(path.Base(info.FullMethod), code).Observe(time.Since(start).Seconds())
	return resp, err
}
