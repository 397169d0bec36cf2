package replay

import (
	"testing"

	"github.com/kvmesh/kvmesh/policy"
)

// TestPromotedBlockKeepsItsAdmission: a block promoted from disk is the
// same block to the store, with the decision admission made when it was
// new. A write-through block whose disk copy is evicted while it is back in
// memory is not written again when memory evicts it (the store writes on
// eviction only blocks admitted "on evict"): it is gone.
func TestPromotedBlockKeepsItsAdmission(t *testing.T) {
	const a, b, c, d, e, f, g, h = 0, 1, 2, 3, 4, 5, 6, 7
	var trace []Request
	for i, id := range []uint64{
		a, b, c, // memory holds b, c; disk a, b, c
		a,    // a from disk, promoted: disk order b, c, a
		a, d, // memory hit; d evicts c from memory (c stays on disk)
		a, e, // disk full: b goes
		a, f, // c goes
		a, g, // a's disk copy goes, a stays in memory
		h, // memory evicts a: written through once, not again
		a, // so a is gone: new again, and written through again
	} {
		trace = append(trace, Request{Timestamp: int64(i) * 1000, InputLength: 512, HashIDs: []uint64{id}})
	}
	res, err := Run(trace, Config{CapacityTokens: 2 * 512, DiskCapacityTokens: 4 * 512, Eviction: nativeLRU,
		Admission: func() (policy.Admission, error) { return writeThrough{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.BlocksWrittenDisk != 9 || res.Hits != 5 || res.DiskHits != 1 {
		t.Fatalf("%d blocks written, %d hits (%d on disk): want 9, 5 and 1", res.BlocksWrittenDisk, res.Hits, res.DiskHits)
	}
}
