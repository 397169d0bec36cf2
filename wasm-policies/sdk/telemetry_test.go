package sdk

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

type gpuWatcher struct{ got []Reading }

func (g *gpuWatcher) Telemetry(r []Reading) { g.got = append(g.got[:0], r...) }

// TestReadingLayout checks Reading against the telemetry record of
// docs/policy-abi.md, byte for byte, through HandleTelemetry.
func TestReadingLayout(t *testing.T) {
	if n := unsafe.Sizeof(Reading{}); n != eventSize {
		t.Fatalf("Reading is %d bytes, the ABI's record %d", n, eventSize)
	}
	Buffer(2)
	rec := unsafe.Slice((*byte)(unsafe.Pointer(&exchange[1])), eventSize)
	binary.LittleEndian.PutUint64(rec[0:], 1_700_000_000_000000001)
	binary.LittleEndian.PutUint64(rec[8:], 3<<30)
	binary.LittleEndian.PutUint64(rec[16:], 80<<30)
	binary.LittleEndian.PutUint64(rec[24:], 5<<20)
	binary.LittleEndian.PutUint64(rec[32:], ^uint64(0)) // -1: unknown
	binary.LittleEndian.PutUint32(rec[40:], 6)
	var g gpuWatcher
	if r := HandleTelemetry(&g, 2); r != 0 {
		t.Fatalf("HandleTelemetry = %d", r)
	}
	want := Reading{Time: 1_700_000_000_000000001, MemoryUsed: 3 << 30, MemoryTotal: 80 << 30, PCIeTxBytesPerSec: 5 << 20, PCIeRxBytesPerSec: -1, Device: 6}
	if len(g.got) != 2 || g.got[1] != want {
		t.Fatalf("decoded %+v, want [_, %+v]", g.got, want)
	}
	if HandleTelemetry(&g, 3) != -1 || HandleTelemetry(&g, -1) != -1 {
		t.Fatal("a count outside the buffer was accepted")
	}
}
