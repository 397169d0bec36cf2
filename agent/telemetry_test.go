package agent

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/gpu"
	"github.com/kvmesh/kvmesh/policy"
)

func TestPolicyReadings(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 5)
	got := policyReadings([]gpu.Telemetry{
		{Index: 0, MemoryUsed: 3 << 30, MemoryTotal: 80 << 30, MemoryOK: true, PCIeTxBytesPerSec: 1 << 20, PCIeRxBytesPerSec: 2 << 20},
		// a driver that would tell neither memory nor throughput
		{Index: 3, MemoryUsed: 7, MemoryTotal: 9, PCIeTxBytesPerSec: -1, PCIeRxBytesPerSec: -1},
	}, now)
	want := []policy.Reading{
		{Time: now.UnixNano(), Device: 0, MemoryUsed: 3 << 30, MemoryTotal: 80 << 30, PCIeTxBytesPerSec: 1 << 20, PCIeRxBytesPerSec: 2 << 20},
		{Time: now.UnixNano(), Device: 3, PCIeTxBytesPerSec: -1, PCIeRxBytesPerSec: -1},
	}
	if len(got) != len(want) {
		t.Fatalf("%d readings, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reading %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
