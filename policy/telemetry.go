package policy

import (
	"encoding/binary"
	"sync/atomic"
)

// Reading is one GPU's telemetry as policies receive it: the ABI's 48-byte
// telemetry record (docs/policy-abi.md, "Telemetry").
type Reading struct {
	Time        int64  // unix nanoseconds of the sample
	MemoryUsed  uint64 // bytes; 0 with MemoryTotal 0 when unknown
	MemoryTotal uint64 // bytes
	// PCIe throughput in bytes/s as the driver samples it: Tx GPU to host
	// (saves), Rx host to GPU (loads); -1 when the driver will not say.
	PCIeTxBytesPerSec int64
	PCIeRxBytesPerSec int64
	Device            uint32 // the GPU's index
}

const telemetryRecordSize = 48

func putReading(b []byte, r *Reading) {
	_ = b[telemetryRecordSize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(r.Time))
	binary.LittleEndian.PutUint64(b[8:], r.MemoryUsed)
	binary.LittleEndian.PutUint64(b[16:], r.MemoryTotal)
	binary.LittleEndian.PutUint64(b[24:], uint64(r.PCIeTxBytesPerSec))
	binary.LittleEndian.PutUint64(b[32:], uint64(r.PCIeRxBytesPerSec))
	binary.LittleEndian.PutUint32(b[40:], r.Device)
	clear(b[44:48])
}

// TelemetryFeed carries the node's newest GPU readings to the bindings of
// every slot. The agent publishes a sample now and then; a binding whose
// module exports kvmesh_telemetry hands it each new sample once, before
// its next call. Safe for concurrent use; the zero value holds no sample.
type TelemetryFeed struct {
	latest atomic.Pointer[telemetrySample]
}

type telemetrySample struct {
	seq      uint64 // 1 for the first sample, then one more per Publish
	readings []Reading
}

// Publish makes readings the newest sample. The feed keeps its own copy.
func (f *TelemetryFeed) Publish(readings []Reading) {
	s := &telemetrySample{seq: 1, readings: append([]Reading(nil), readings...)}
	for {
		old := f.latest.Load()
		if old != nil {
			s.seq = old.seq + 1
		}
		if f.latest.CompareAndSwap(old, s) {
			return
		}
	}
}

// Latest is the newest sample (nil before the first Publish).
func (f *TelemetryFeed) Latest() []Reading {
	if s := f.latest.Load(); s != nil {
		return s.readings
	}
	return nil
}

func (f *TelemetryFeed) sample() *telemetrySample {
	if f == nil {
		return nil
	}
	return f.latest.Load()
}

// deliverTelemetry hands the guest the feed's newest sample if it has not
// had it; b.mu must be held, and the exchange buffer must hold nothing
// the guest has yet to read. A module that does not export
// kvmesh_telemetry is never told.
func (b *binding) deliverTelemetry() error {
	s := b.cfg.Telemetry.sample()
	if s == nil || s.seq == b.telemetrySeq || b.in.fn[exportTelemetry] == nil {
		return nil
	}
	b.telemetrySeq = s.seq
	readings := s.readings[:min(len(s.readings), b.in.records)]
	buf := b.in.buffer()
	for i := range readings {
		putReading(buf[i*telemetryRecordSize:], &readings[i])
		b.in.state.now = max(b.in.state.now, readings[i].Time)
	}
	r, err := b.call(exportTelemetry, int32(len(readings)))
	if err == nil && r != 0 {
		err = b.answer("%s returned %d", exportTelemetry, r)
	}
	return err
}
