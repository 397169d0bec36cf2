package store

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/kvmesh/kvmesh/policy"
)

// A disk smaller than the configured capacity fills up: the write that
// fails is refused with NO_SPACE and leaves nothing behind, and every block
// acknowledged before it still reads back.
func TestDiskFullRefusesOnlyTheWriteThatDoesNotFit(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })

	s := newStore(t, 1<<20, 8<<20, dir)
	var acked []string
	var full error
	for i := 0; i < 40 && full == nil; i++ {
		k := fmt.Sprint(i)
		if err := s.Put("", []byte(k), [][]byte{value(i, 16*kib)}, PutOptions{Durability: policy.DurableDisk}); err != nil {
			full = err
			if found, _ := s.Exist("", [][]byte{[]byte(k)}); found[0] {
				t.Fatal("a refused write left its block behind")
			}
			break
		}
		acked = append(acked, k)
	}
	if CodeOf(full) != CodeNoSpace {
		t.Fatalf("writing past a full disk: %v, want NO_SPACE", full)
	}
	for _, k := range acked {
		var i int
		fmt.Sscan(k, &i)
		mustGet(t, s, k, value(i, 16*kib))
	}
	mustPut(t, s, "memory-still-works", []byte("ok"), policy.DurableMemory)
	if s.Stat().DiskWriteErrs == 0 {
		t.Fatal("the failed write was not counted")
	}
}
