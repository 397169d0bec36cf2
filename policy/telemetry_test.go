package policy

import (
	"context"
	"strings"
	"testing"
)

func diskOf(t *testing.T, d []Decision) DiskWrite {
	t.Helper()
	if len(d) != 3 {
		t.Fatalf("%d decisions for 3 inserts", len(d))
	}
	for _, x := range d[1:] {
		if x != d[0] {
			t.Fatalf("decisions differ within one batch: %+v", d)
		}
	}
	return d[0].Disk
}

func TestTelemetryReachesModule(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "gpu_pressure"))
	feed := &TelemetryFeed{}
	w, err := m.NewAdmission(context.Background(), BindConfig{Telemetry: feed})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	admit := func() DiskWrite { return diskOf(t, w.Admit(inserts(1, 2, 3), nil)) }

	if got := admit(); got != DiskNow {
		t.Fatalf("before any reading: disk %d, want write-through (%d)", got, DiskNow)
	}
	const gib = 1 << 30
	feed.Publish([]Reading{
		{Time: 10, Device: 0, MemoryUsed: 10 * gib, MemoryTotal: 80 * gib},
		{Time: 10, Device: 1, MemoryUsed: 70 * gib, MemoryTotal: 80 * gib, PCIeTxBytesPerSec: -1, PCIeRxBytesPerSec: -1},
	})
	if got := admit(); got != DiskNever {
		t.Fatalf("GPU 1 seven-eighths full: disk %d, want memory only (%d)", got, DiskNever)
	}
	feed.Publish([]Reading{{Time: 20, Device: 1, MemoryUsed: 20 * gib, MemoryTotal: 80 * gib}})
	if got := admit(); got != DiskNow {
		t.Fatalf("pressure gone: disk %d, want write-through (%d)", got, DiskNow)
	}
	if err := w.Err(); err != nil {
		t.Fatalf("module out of service: %v", err)
	}
	if got := feed.Latest(); len(got) != 1 || got[0].MemoryUsed != 20*gib {
		t.Fatalf("Latest = %+v, want the last sample", got)
	}
}

func TestTelemetryBadAnswerFallsBack(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "gpu_pressure"))
	metrics := NewMetrics()
	feed := &TelemetryFeed{}
	w, err := m.NewAdmission(context.Background(), BindConfig{Telemetry: feed, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	feed.Publish([]Reading{{Device: 16, MemoryUsed: 1, MemoryTotal: 2}})
	if got := diskOf(t, w.Admit(inserts(1, 2, 3), nil)); got != DiskOnEvict {
		t.Fatalf("after a bad telemetry answer: disk %d, want the native write-back (%d)", got, DiskOnEvict)
	}
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "kvmesh_telemetry returned 7") {
		t.Fatalf("Err = %v, want the telemetry export's bad status", err)
	}
	if got := counter(t, metrics.failures.WithLabelValues("admission", "answer")); got != 1 {
		t.Fatalf("failures{admission,answer} = %v, want 1", got)
	}
}

// A module without the export is never told, and a feed changes nothing
// for it.
func TestTelemetryOptional(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "good"))
	feed := &TelemetryFeed{}
	w, err := m.NewEviction(context.Background(), TierMemory, BindConfig{Telemetry: feed})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	feed.Publish([]Reading{{Device: 99}}) // would be refused by a module that reads it
	w.Observe(inserts(1, 2, 3))
	if got := w.Victims(nil, 1); len(got) != 1 || got[0] != 1 {
		t.Fatalf("victims %v, want the FIFO head [1]", got)
	}
	if err := w.Err(); err != nil {
		t.Fatalf("module out of service: %v", err)
	}
}

func TestTelemetryModuleValidates(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, testLimits)
	m := compile(t, rt, wat(t, "gpu_pressure"))
	if err := m.DryRun(context.Background()); err != nil {
		t.Fatalf("dry run with synthetic telemetry: %v", err)
	}
}
