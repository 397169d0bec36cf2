package agent

import (
	"time"

	"github.com/kvmesh/kvmesh/gpu"
	"github.com/kvmesh/kvmesh/policy"
)

// telemetryInterval is how often the GPUs are sampled for policies. A
// sample costs ~40 ms per GPU (NVML's PCIe counters sample a window), so
// it runs on its own goroutine, never on a request's path.
const telemetryInterval = 5 * time.Second

// feedTelemetry publishes the GPUs' readings to the policies' feed until
// stop is closed. Host-only nodes have nothing to say and never publish.
func (a *Agent) feedTelemetry(feed *policy.TelemetryFeed, stop <-chan struct{}) {
	if _, hostOnly := a.gpus.HostOnly(); hostOnly {
		return
	}
	t := time.NewTicker(telemetryInterval)
	defer t.Stop()
	for {
		feed.Publish(policyReadings(a.gpus.Telemetry(), time.Now()))
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// policyReadings converts a telemetry sample into the ABI's records: what
// the driver would not say is 0 (memory) or -1 (PCIe throughput).
func policyReadings(sample []gpu.Telemetry, now time.Time) []policy.Reading {
	out := make([]policy.Reading, len(sample))
	for i, t := range sample {
		r := policy.Reading{Time: now.UnixNano(), Device: uint32(t.Index),
			PCIeTxBytesPerSec: t.PCIeTxBytesPerSec, PCIeRxBytesPerSec: t.PCIeRxBytesPerSec}
		if t.MemoryOK {
			r.MemoryUsed, r.MemoryTotal = t.MemoryUsed, t.MemoryTotal
		}
		out[i] = r
	}
	return out
}
