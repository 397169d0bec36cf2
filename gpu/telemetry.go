package gpu

import (
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// Telemetry is one reading of a GPU's changing state. A field the driver
// would not give is -1 (counts) or left at its zero value with OK false.
type Telemetry struct {
	Index       int
	MemoryUsed  uint64 // bytes
	MemoryTotal uint64 // bytes
	MemoryOK    bool
	// PCIe throughput as NVML samples it (a ~20 ms window), bytes/s: TX is
	// GPU to host (what saves move), RX host to GPU (loads). -1: unsupported.
	PCIeTxBytesPerSec int64
	PCIeRxBytesPerSec int64
	PCIeGen           int // current link; -1: unsupported
	PCIeWidth         int
}

// Telemetry reads every device now. NVML's throughput counters each sample
// for about 20 ms, so a call costs ~40 ms per GPU: fine for a scrape or a
// policy tick, not for a per-request path.
func (n *Node) Telemetry() []Telemetry {
	out := make([]Telemetry, 0, len(n.handles))
	for i, h := range n.handles {
		t := Telemetry{Index: n.devices[i].Index, PCIeTxBytesPerSec: -1, PCIeRxBytesPerSec: -1, PCIeGen: -1, PCIeWidth: -1}
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			t.MemoryUsed, t.MemoryTotal, t.MemoryOK = m.Used, m.Total, true
		}
		// NVML reports PCIe throughput in KiB/s.
		if v, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); ret == nvml.SUCCESS {
			t.PCIeTxBytesPerSec = int64(v) * 1024
		}
		if v, ret := h.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); ret == nvml.SUCCESS {
			t.PCIeRxBytesPerSec = int64(v) * 1024
		}
		if v, ret := h.GetCurrPcieLinkGeneration(); ret == nvml.SUCCESS {
			t.PCIeGen = v
		}
		if v, ret := h.GetCurrPcieLinkWidth(); ret == nvml.SUCCESS {
			t.PCIeWidth = v
		}
		out = append(out, t)
	}
	return out
}

var (
	gpuLabels  = []string{"gpu", "uuid"}
	descHost   = prometheus.NewDesc("kvmesh_gpu_host_only", "1 when the agent runs without a usable GPU.", nil, nil)
	descInfo   = prometheus.NewDesc("kvmesh_gpu_info", "Static facts of a GPU, always 1.", []string{"gpu", "uuid", "name", "numa_node"}, nil)
	descMemUse = prometheus.NewDesc("kvmesh_gpu_memory_used_bytes", "GPU memory in use.", gpuLabels, nil)
	descMemTot = prometheus.NewDesc("kvmesh_gpu_memory_total_bytes", "GPU memory in total.", gpuLabels, nil)
	descTx     = prometheus.NewDesc("kvmesh_gpu_pcie_tx_bytes_per_second", "PCIe throughput GPU to host, NVML's ~20 ms sample.", gpuLabels, nil)
	descRx     = prometheus.NewDesc("kvmesh_gpu_pcie_rx_bytes_per_second", "PCIe throughput host to GPU, NVML's ~20 ms sample.", gpuLabels, nil)
	descGen    = prometheus.NewDesc("kvmesh_gpu_pcie_link_generation", "Current PCIe link generation (drops at idle).", gpuLabels, nil)
	descWidth  = prometheus.NewDesc("kvmesh_gpu_pcie_link_width", "Current PCIe link width in lanes.", gpuLabels, nil)
	descMaxBW  = prometheus.NewDesc("kvmesh_gpu_pcie_max_bandwidth_bytes_per_second", "Theoretical one-way PCIe bandwidth at the link's best generation and width.", gpuLabels, nil)
)

// Describe implements prometheus.Collector: the agent registers the Node as
// is (registry.MustRegister(node)).
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHost, descInfo, descMemUse, descMemTot, descTx, descRx, descGen, descWidth, descMaxBW} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; it reads fresh Telemetry.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	_, hostOnly := n.HostOnly()
	ch <- prometheus.MustNewConstMetric(descHost, prometheus.GaugeValue, boolFloat(hostOnly))
	for i, t := range n.Telemetry() {
		d := n.devices[i]
		gpu := strconv.Itoa(d.Index)
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, gpu, d.UUID, d.Name, strconv.Itoa(d.NUMANode))
		ch <- prometheus.MustNewConstMetric(descMaxBW, prometheus.GaugeValue, d.PCIeBandwidth(), gpu, d.UUID)
		if t.MemoryOK {
			ch <- prometheus.MustNewConstMetric(descMemUse, prometheus.GaugeValue, float64(t.MemoryUsed), gpu, d.UUID)
			ch <- prometheus.MustNewConstMetric(descMemTot, prometheus.GaugeValue, float64(t.MemoryTotal), gpu, d.UUID)
		}
		// A metric the driver cannot give is left out rather than faked as 0.
		for _, m := range []struct {
			desc *prometheus.Desc
			v    int64
		}{{descTx, t.PCIeTxBytesPerSec}, {descRx, t.PCIeRxBytesPerSec}, {descGen, int64(t.PCIeGen)}, {descWidth, int64(t.PCIeWidth)}} {
			if m.v >= 0 {
				ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(m.v), gpu, d.UUID)
			}
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
