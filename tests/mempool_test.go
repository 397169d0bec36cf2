package tests

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// --mempool-socket moves the pool socket; a pool registered there carries
// blocks in and out of a real agent process.
func TestMempoolSocketFlag(t *testing.T) {
	t.Parallel()
	mp := filepath.Join(t.TempDir(), "pools.sock")
	a := startAgent(t, t.TempDir(), "--mem-capacity", "16MiB", "--mempool-socket", mp)
	c := a.client()
	p, err := client.NewPool(mp, "proc", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	copy(p.Mem, "block bytes")
	ctx := context.Background()
	item := []client.PoolItem{{Key: []byte("k"), PoolID: p.ID, Iovecs: []client.Iovec{{Offset: 0, Length: 11}}}}
	if n, err := c.PoolBatchPut(ctx, "", item, kvmeshv1.Durability_DURABILITY_MEMORY); err != nil || n[0] != 11 {
		t.Fatalf("PoolBatchPut: %v %v", n, err)
	}
	item[0].Iovecs[0].Offset = 4096
	if n, err := c.PoolBatchGet(ctx, "", item); err != nil || n[0] != 11 || string(p.Mem[4096:4107]) != "block bytes" {
		t.Fatalf("PoolBatchGet: %v %v", n, err)
	}
	p.Close()
	if _, err := client.NewPool(client.DefaultMempoolSocket(a.socket), "x", 4096); err == nil {
		t.Fatal("the default mempool socket answered although --mempool-socket moved it")
	}
}
