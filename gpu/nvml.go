// Package gpu discovers this node's NVIDIA GPUs through NVML and reports
// their telemetry (memory, PCIe link and throughput) to Prometheus and to
// policies. The layout-swap core lives in the subpackages: layout (shapes),
// swap (host C path) and cuda (device path, build tag cuda).
//
// Everything here is written against nvml.Interface, so tests drive it with
// go-nvml's mocks. The real library is loaded with dlopen at Discover time;
// binaries must not be linked with -z now (go-nvml leaves its NVML symbols
// unresolved until then).
package gpu

import (
	"fmt"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is the static description of one GPU, read once at discovery.
type Device struct {
	Index       int
	UUID        string
	Name        string
	MemoryTotal uint64 // bytes
	// PCIe link as it can run: the highest generation and width both the
	// GPU and its slot support. The current link drops to Gen1 at idle to
	// save power, so bandwidth planning uses these; telemetry reports the
	// current link.
	PCIeMaxGen   int
	PCIeMaxWidth int
	NUMANode     int // -1 when the driver does not say
}

// PCIeBandwidth is the theoretical one-way bandwidth of d's link in bytes/s.
func (d Device) PCIeBandwidth() float64 { return PCIeBandwidth(d.PCIeMaxGen, d.PCIeMaxWidth) }

// pcieLaneBytes is one lane's one-way payload rate per generation: the
// transfer rate times the line-code efficiency (8b/10b up to Gen2,
// 128b/130b for Gen3-5, 242/256 FLITs for Gen6), in bytes/s.
var pcieLaneBytes = map[int]float64{
	1: 2.5e9 * 8 / 10 / 8,
	2: 5e9 * 8 / 10 / 8,
	3: 8e9 * 128 / 130 / 8,
	4: 16e9 * 128 / 130 / 8,
	5: 32e9 * 128 / 130 / 8,
	6: 64e9 * 242 / 256 / 8,
}

// PCIeBandwidth is the theoretical one-way bandwidth in bytes/s of a link of
// generation gen and width lanes; 0 for a generation it does not know.
func PCIeBandwidth(gen, width int) float64 {
	return pcieLaneBytes[gen] * float64(max(width, 0))
}

// Node is this machine's view of its GPUs. With no usable driver it is in
// host-only mode: no devices, and the reason was logged once by Discover.
type Node struct {
	lib      nvml.Interface
	handles  []nvml.Device
	devices  []Device
	hostOnly string // why there are no GPUs; "" when NVML answered
}

// Discover initialises NVML through lib (nvml.New() in the agent, a mock in
// tests) and reads every device. It never fails: without a driver
// (ERROR_LIBRARY_NOT_FOUND), when NVML will not initialise, or with no GPUs
// the node is host-only, which it says once through log. Close releases NVML.
func Discover(lib nvml.Interface, log *slog.Logger) *Node {
	n := &Node{lib: lib}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		n.hostOnly = "NVML did not initialise: " + nvml.ErrorString(ret)
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			n.hostOnly = "no NVIDIA driver (libnvidia-ml.so.1 not found)"
		}
		n.lib = nil // nothing to shut down
		log.Info("gpu: host-only mode", "reason", n.hostOnly)
		return n
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		count = 0
		log.Warn("gpu: cannot count devices", "err", nvml.ErrorString(ret))
	}
	for i := range count {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			log.Warn("gpu: skipping device", "index", i, "err", nvml.ErrorString(ret))
			continue
		}
		d, err := describe(i, h)
		if err != nil {
			log.Warn("gpu: skipping device", "index", i, "err", err)
			continue
		}
		n.handles = append(n.handles, h)
		n.devices = append(n.devices, d)
	}
	if len(n.devices) == 0 {
		n.hostOnly = "NVML sees no usable GPU"
		log.Info("gpu: host-only mode", "reason", n.hostOnly)
		return n
	}
	for _, d := range n.devices {
		log.Info("gpu: found device", "index", d.Index, "name", d.Name, "uuid", d.UUID,
			"memory_bytes", d.MemoryTotal, "pcie_gen", d.PCIeMaxGen, "pcie_width", d.PCIeMaxWidth,
			"pcie_gbps", d.PCIeBandwidth()/1e9, "numa_node", d.NUMANode)
	}
	return n
}

// describe reads one device. Identity and memory are required; PCIe and
// NUMA facts a driver may not support are left at 0 and -1.
func describe(index int, h nvml.Device) (Device, error) {
	d := Device{Index: index, NUMANode: -1}
	var ret nvml.Return
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("uuid: %s", nvml.ErrorString(ret))
	}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("name: %s", nvml.ErrorString(ret))
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return d, fmt.Errorf("memory: %s", nvml.ErrorString(ret))
	}
	d.MemoryTotal = mem.Total
	if v, ret := h.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
		d.PCIeMaxGen = v
	}
	if v, ret := h.GetMaxPcieLinkWidth(); ret == nvml.SUCCESS {
		d.PCIeMaxWidth = v
	}
	if v, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS {
		d.NUMANode = v
	}
	return d, nil
}

// HostOnly reports whether the node has no usable GPU, and why.
func (n *Node) HostOnly() (reason string, hostOnly bool) { return n.hostOnly, n.hostOnly != "" }

// Devices lists the GPUs found, by NVML index.
func (n *Node) Devices() []Device { return append([]Device(nil), n.devices...) }

// Close shuts NVML down; the Node must not be used afterwards.
func (n *Node) Close() error {
	if n.lib == nil {
		return nil
	}
	lib := n.lib
	n.lib, n.handles, n.devices = nil, nil, nil
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: nvml shutdown: %s", nvml.ErrorString(ret))
	}
	return nil
}
