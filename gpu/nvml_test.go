package gpu

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// dgx returns the go-nvml DGX A100 mock with the PCIe, NUMA and throughput
// answers an A100 SXM4 node gives (the mock leaves those unset): Gen4 x16,
// GPUs 0-3 on NUMA node 0 and 4-7 on node 1, link idling at Gen1.
func dgx() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo.Used = uint64(i+1) << 30
		dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		dev.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 1, nvml.SUCCESS }
		dev.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return i / 4, nvml.SUCCESS }
		dev.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			if c == nvml.PCIE_UTIL_TX_BYTES {
				return 1000, nvml.SUCCESS
			}
			return 2000, nvml.SUCCESS
		}
	}
	return s
}

func quietLog(buf *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

func TestDiscoverDGXA100(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	n := Discover(dgx(), quietLog(&logs))
	defer n.Close()
	if reason, hostOnly := n.HostOnly(); hostOnly {
		t.Fatalf("host-only: %s", reason)
	}
	devs := n.Devices()
	if len(devs) != 8 {
		t.Fatalf("%d devices, want 8", len(devs))
	}
	for i, d := range devs {
		if d.Index != i || d.Name != "Mock NVIDIA A100-SXM4-40GB" || d.MemoryTotal != 42949672960 ||
			d.PCIeMaxGen != 4 || d.PCIeMaxWidth != 16 || d.NUMANode != i/4 || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("device %d = %+v", i, d)
		}
		// Gen4 x16: 16 GT/s * 128/130 / 8 bits * 16 lanes = 31.5 GB/s one way.
		if bw := d.PCIeBandwidth(); math.Abs(bw-31.5077e9) > 1e6 {
			t.Errorf("device %d PCIe bandwidth %.4g, want 31.51e9", i, bw)
		}
	}
	if strings.Contains(logs.String(), "host-only") {
		t.Errorf("logged host-only with GPUs present:\n%s", logs.String())
	}
}

func TestPCIeBandwidth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		gen, width int
		want       float64
	}{
		{1, 1, 250e6},
		{2, 8, 4e9},
		{3, 16, 15.754e9},
		{5, 16, 63.015e9},
		{6, 16, 121e9},
		{0, 16, 0},
		{7, 16, 0},
		{4, 0, 0},
	}
	for _, tc := range tests {
		if got := PCIeBandwidth(tc.gen, tc.width); math.Abs(got-tc.want) > 1e6 {
			t.Errorf("PCIeBandwidth(%d, %d) = %.5g, want %.5g", tc.gen, tc.width, got, tc.want)
		}
	}
}

func TestHostOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mock   func() nvml.Interface
		reason string
	}{
		{"no driver", func() nvml.Interface {
			s := dgx()
			s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
			return s
		}, "no NVIDIA driver"},
		{"driver not loaded", func() nvml.Interface {
			s := dgx()
			s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
			return s
		}, "NVML did not initialise"},
		{"no devices", func() nvml.Interface {
			s := dgx()
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
			return s
		}, "no usable GPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			n := Discover(tc.mock(), quietLog(&logs))
			reason, hostOnly := n.HostOnly()
			if !hostOnly || !strings.Contains(reason, tc.reason) || len(n.Devices()) != 0 {
				t.Fatalf("HostOnly() = %q, %t; devices %d", reason, hostOnly, len(n.Devices()))
			}
			// Said once at discovery, not again on every scrape.
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(n)
			for range 3 {
				if _, err := reg.Gather(); err != nil {
					t.Fatal(err)
				}
			}
			if c := strings.Count(logs.String(), "host-only"); c != 1 {
				t.Fatalf("host-only logged %d times:\n%s", c, logs.String())
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRealLibrary runs discovery against the real NVML: on a machine without
// a driver (CI) that is host-only mode, on a GPU machine a device list. It is
// not parallel: loading libnvidia-ml rewrites a go-nvml package variable that
// every nvml.Return's Error() reads, so it runs before the mock tests resume
// (the agent likewise discovers once, before anything else touches NVML).
func TestRealLibrary(t *testing.T) {
	var logs bytes.Buffer
	n := Discover(nvml.New(), quietLog(&logs))
	defer n.Close()
	if reason, hostOnly := n.HostOnly(); hostOnly {
		t.Logf("host-only: %s", reason)
		return
	}
	for _, d := range n.Devices() {
		t.Logf("%+v, PCIe %.1f GB/s", d, d.PCIeBandwidth()/1e9)
	}
}

func TestSkipsDeviceThatWillNotDescribeItself(t *testing.T) {
	t.Parallel()
	s := dgx()
	s.Devices[3].(*dgxa100.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	var logs bytes.Buffer
	n := Discover(s, quietLog(&logs))
	if got := len(n.Devices()); got != 7 {
		t.Fatalf("%d devices, want 7", got)
	}
	if !strings.Contains(logs.String(), "skipping device") {
		t.Fatalf("lost GPU not logged:\n%s", logs.String())
	}
}

func TestCollector(t *testing.T) {
	t.Parallel()
	s := dgx()
	// GPU 7's driver cannot sample PCIe throughput: its series are left out.
	s.Devices[7].(*dgxa100.Device).GetPcieThroughputFunc = func(nvml.PcieUtilCounter) (uint32, nvml.Return) {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	n := Discover(s, quietLog(&bytes.Buffer{}))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	tests := []struct {
		metric string
		series int
		gpu0   float64
	}{
		{"kvmesh_gpu_host_only", 1, 0},
		{"kvmesh_gpu_info", 8, 1},
		{"kvmesh_gpu_memory_used_bytes", 8, 1 << 30},
		{"kvmesh_gpu_memory_total_bytes", 8, 42949672960},
		{"kvmesh_gpu_pcie_tx_bytes_per_second", 7, 1000 * 1024},
		{"kvmesh_gpu_pcie_rx_bytes_per_second", 7, 2000 * 1024},
		{"kvmesh_gpu_pcie_link_generation", 8, 1},
		{"kvmesh_gpu_pcie_link_width", 8, 16},
		{"kvmesh_gpu_pcie_max_bandwidth_bytes_per_second", 8, PCIeBandwidth(4, 16)},
	}
	for _, tc := range tests {
		f := byName[tc.metric]
		if f == nil {
			t.Errorf("%s missing", tc.metric)
			continue
		}
		if len(f.Metric) != tc.series {
			t.Errorf("%s: %d series, want %d", tc.metric, len(f.Metric), tc.series)
		}
		if got := f.Metric[0].GetGauge().GetValue(); got != tc.gpu0 {
			t.Errorf("%s first series = %v, want %v", tc.metric, got, tc.gpu0)
		}
	}
	tel := n.Telemetry()
	if tel[7].PCIeTxBytesPerSec != -1 || tel[0].PCIeRxBytesPerSec != 2000*1024 || tel[2].MemoryUsed != 3<<30 {
		t.Errorf("telemetry = %+v / %+v / %+v", tel[0], tel[2], tel[7])
	}
}
