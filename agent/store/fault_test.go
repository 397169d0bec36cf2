package store

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A client that shrinks its mapped pool under a request costs that request
// an error, not the agent its life.
func TestShrunkClientMemoryIsAnErrorNotACrash(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 0, "")
	mustPut(t, s, "k", value(1, 8*kib), 0)

	f, err := os.Create(filepath.Join(t.TempDir(), "pool"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(16 * kib)
	pool, err := unix.Mmap(int(f.Fd()), 0, 16*kib, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(pool)
	f.Truncate(0) // the pages behind pool are gone: touching them raises SIGBUS

	if err := s.Put("", []byte("from-pool"), [][]byte{pool[:8*kib]}, PutOptions{}); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("Put from a shrunk pool: %v, want INVALID_ARGUMENT", err)
	}
	if n, err := s.Get("", []byte("k"), [][]byte{pool[:8*kib]}); CodeOf(err) != CodeInvalidArgument || n != 0 {
		t.Fatalf("Get into a shrunk pool: %d, %v", n, err)
	}
	mustGet(t, s, "k", value(1, 8*kib)) // the block and its lease survived
	if free := s.arena.FreeBytes(); free != s.arena.Capacity()-8*kib {
		t.Fatalf("the failed Put leaked pages: %d free", free)
	}
	mustPut(t, s, "after", []byte("still serving"), 0)
}
