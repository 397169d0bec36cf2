package sdk

import "unsafe"

// Reading is one GPU's telemetry, laid out exactly as the ABI's 48-byte
// telemetry record so a batch is read in place.
type Reading struct {
	Time        int64  // unix nanoseconds of the sample
	MemoryUsed  uint64 // bytes; 0 with MemoryTotal 0 when unknown
	MemoryTotal uint64 // bytes
	// PCIe throughput in bytes/s: Tx GPU to host (saves), Rx host to GPU
	// (loads); -1 when the driver will not say.
	PCIeTxBytesPerSec int64
	PCIeRxBytesPerSec int64
	Device            uint32 // the GPU's index
	_                 uint32
}

// Telemetry is implemented by a policy of any slot that wants the node's
// GPU readings. The host hands each new sample over once, before the
// slot's next call; hosts without GPUs never call it.
type Telemetry interface {
	Telemetry(readings []Reading)
}

// HandleTelemetry hands the sample of n readings in the buffer to p:
//
//	//go:wasmexport kvmesh_telemetry
//	func telemetry(n int32) int32 { return sdk.HandleTelemetry(guest, n) }
func HandleTelemetry(p Telemetry, n int32) int32 {
	if n < 0 || int(n) > len(exchange) {
		return -1
	}
	if n > 0 {
		p.Telemetry(unsafe.Slice((*Reading)(unsafe.Pointer(&exchange[0])), n))
	}
	return 0
}
