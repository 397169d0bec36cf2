package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"testing"

	"github.com/kvmesh/kvmesh/agent"
	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

const mem = kvmeshv1.Durability_DURABILITY_MEMORY

// start runs an in-process agent and returns a client and a 1 MiB pool.
func start(t *testing.T) (*client.Client, *client.Pool, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.DataDir, cfg.Socket, cfg.AdminAddr = dir, filepath.Join(dir, "agent.sock"), ""
	cfg.MemCapacity, cfg.DiskCapacity, cfg.Namespaces = 32<<20, 0, []string{"default", "m2"}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c, err := client.Dial(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	mp := client.DefaultMempoolSocket(cfg.Socket)
	p, err := client.NewPool(mp, "test", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return c, p, mp
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*13)
	}
}

func TestPoolBatchPutGet(t *testing.T) {
	t.Parallel()
	c, p, _ := start(t)
	ctx := context.Background()
	fill(p.Mem[:64<<10], 1)
	puts := []client.PoolItem{
		{Key: []byte("a"), PoolID: p.ID, Iovecs: []client.Iovec{{0, 4096}, {10000, 100}}},
		{Key: []byte("b"), PoolID: p.ID, Iovecs: []client.Iovec{{20000, 30000}}},
	}
	n, err := c.PoolBatchPut(ctx, "m2", puts, mem)
	if err != nil || n[0] != 4196 || n[1] != 30000 {
		t.Fatalf("PoolBatchPut: %v %v", n, err)
	}
	wantA := append(bytes.Clone(p.Mem[:4096]), p.Mem[10000:10100]...)
	wantB := bytes.Clone(p.Mem[20000:50000])
	// a into two pieces elsewhere, b into a larger buffer (the block fills
	// its start), and a miss.
	n, err = c.PoolBatchGet(ctx, "m2", []client.PoolItem{
		{Key: []byte("a"), PoolID: p.ID, Iovecs: []client.Iovec{{500000, 196}, {600000, 4000}}},
		{Key: []byte("b"), PoolID: p.ID, Iovecs: []client.Iovec{{700000, 40000}}},
		{Key: []byte("nope"), PoolID: p.ID, Iovecs: []client.Iovec{{0, 10}}},
	})
	if err != nil || n[0] != 4196 || n[1] != 30000 || n[2] != client.NotFound {
		t.Fatalf("PoolBatchGet: %v %v", n, err)
	}
	gotA := append(bytes.Clone(p.Mem[500000:500196]), p.Mem[600000:604000]...)
	if !bytes.Equal(gotA, wantA) || !bytes.Equal(p.Mem[700000:730000], wantB) {
		t.Fatal("bytes differ")
	}
	// The inline path sees the same block.
	if v, err := c.Get(ctx, "m2", []byte("b")); err != nil || !bytes.Equal(v, wantB) {
		t.Fatalf("inline Get: %v", err)
	}
}

// Per-key codes of the pool ops (docs/errors.md), bounds included.
func TestPoolOpErrors(t *testing.T) {
	t.Parallel()
	c, p, mp := start(t)
	ctx := context.Background()
	size := uint64(len(p.Mem))
	if n, err := c.PoolBatchPut(ctx, "", []client.PoolItem{{Key: []byte("k"), PoolID: p.ID, Iovecs: []client.Iovec{{0, 8192}}}}, mem); err != nil || n[0] != 8192 {
		t.Fatalf("PoolBatchPut: %v %v", n, err)
	}
	gone, err := client.NewPool(mp, "gone", 4096)
	if err != nil {
		t.Fatal(err)
	}
	goneID := gone.ID
	gone.Close()
	cases := []struct {
		name string
		get  bool
		it   client.PoolItem
		want store.Code
	}{
		{"put pool 0", false, client.PoolItem{[]byte("x"), 0, []client.Iovec{{0, 1}}}, store.CodeInvalidArgument},
		{"put no iovec", false, client.PoolItem{[]byte("x"), p.ID, nil}, store.CodeInvalidArgument},
		{"put unknown pool", false, client.PoolItem{[]byte("x"), 77, []client.Iovec{{0, 1}}}, store.CodeUnknownPool},
		{"put closed pool", false, client.PoolItem{[]byte("x"), goneID, []client.Iovec{{0, 1}}}, store.CodeUnknownPool},
		{"put length past the pool", false, client.PoolItem{[]byte("x"), p.ID, []client.Iovec{{1, size}}}, store.CodeOutOfRange},
		{"put offset near 2^64", false, client.PoolItem{[]byte("x"), p.ID, []client.Iovec{{math.MaxUint64, 1}}}, store.CodeOutOfRange},
		{"put offset+length overflow", false, client.PoolItem{[]byte("x"), p.ID, []client.Iovec{{4096, math.MaxUint64 - 4095}}}, store.CodeOutOfRange},
		{"put bad key", false, client.PoolItem{nil, p.ID, []client.Iovec{{0, 1}}}, store.CodeInvalidKey},
		{"get miss", true, client.PoolItem{[]byte("x"), p.ID, []client.Iovec{{0, 1}}}, store.CodeNotFound},
		{"get buffer too small", true, client.PoolItem{[]byte("k"), p.ID, []client.Iovec{{0, 4096}, {8192, 4095}}}, store.CodeBufferSize},
		{"get length past the pool", true, client.PoolItem{[]byte("k"), p.ID, []client.Iovec{{size - 8191, 8192}}}, store.CodeOutOfRange},
		{"get offset near 2^64", true, client.PoolItem{[]byte("k"), p.ID, []client.Iovec{{math.MaxUint64 - 8191, 8192}}}, store.CodeOutOfRange},
		{"get unknown pool", true, client.PoolItem{[]byte("k"), 77, []client.Iovec{{0, 8192}}}, store.CodeUnknownPool},
		{"get closed pool", true, client.PoolItem{[]byte("k"), goneID, []client.Iovec{{0, 8192}}}, store.CodeUnknownPool},
		{"get pool 0", true, client.PoolItem{[]byte("k"), 0, []client.Iovec{{0, 8192}}}, store.CodeInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			op := c.PoolBatchPut
			if tc.get {
				op = func(ctx context.Context, ns string, items []client.PoolItem, _ kvmeshv1.Durability) ([]int64, error) {
					return c.PoolBatchGet(ctx, ns, items)
				}
			}
			n, err := op(ctx, "", []client.PoolItem{tc.it}, mem)
			if err != nil || len(n) != 1 || n[0] != int64(tc.want) {
				t.Fatalf("got %v %v, want [%d] (%v)", n, err, tc.want, tc.want)
			}
		})
	}
}

func TestPoolTokens(t *testing.T) {
	t.Parallel()
	c, p, _ := start(t)
	ctx := context.Background()
	fill(p.Mem[:3000], 9)
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	bufs := []client.PoolBuffer{ // blocks of 4, 4 and a tail of 2 tokens
		{p.ID, []client.Iovec{{0, 1000}}}, {p.ID, []client.Iovec{{1000, 1000}}}, {p.ID, []client.Iovec{{2000, 1000}}},
	}
	if n, err := c.PoolWriteTokens(ctx, "", tokens, 4, bufs, mem); err != nil || n[0] != 1000 || n[2] != 1000 {
		t.Fatalf("PoolWriteTokens: %v %v", n, err)
	}
	if m, err := c.Match(ctx, "", append(tokens[:8:8], 99, 98), 4); err != nil || m != 2 {
		t.Fatalf("Match: %d %v", m, err)
	}
	out := []client.PoolBuffer{{p.ID, []client.Iovec{{10000, 1000}}}, {p.ID, []client.Iovec{{20000, 1000}}}, {p.ID, []client.Iovec{{30000, 1000}}}}
	if n, err := c.PoolReadTokens(ctx, "", tokens, 4, out); err != nil || n[0] != 1000 || n[1] != 1000 || n[2] != 1000 {
		t.Fatalf("PoolReadTokens: %v %v", n, err)
	}
	if !bytes.Equal(p.Mem[10000:11000], p.Mem[0:1000]) || !bytes.Equal(p.Mem[30000:31000], p.Mem[2000:3000]) {
		t.Fatal("token blocks differ")
	}
	vals, errs, err := c.ReadTokens(ctx, "", tokens, 4)
	if err != nil || errs[1] != nil || !bytes.Equal(vals[1], p.Mem[1000:2000]) {
		t.Fatalf("inline ReadTokens: %v %v", errs, err)
	}
	if _, err := c.PoolReadTokens(ctx, "", tokens, 4, out[:2]); err == nil {
		t.Fatal("a buffer count that does not match the blocks was accepted")
	}
}

// The rest of the service through the client: inline batches, pins,
// tokens, existence, removal, clear, stat.
func TestInlineOps(t *testing.T) {
	t.Parallel()
	c, _, _ := start(t)
	ctx := context.Background()
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	errs, err := c.BatchPut(ctx, "m2", keys, [][]byte{[]byte("1"), []byte("22"), []byte("333")}, mem)
	if err != nil || errs[0] != nil || errs[2] != nil {
		t.Fatalf("BatchPut: %v %v", errs, err)
	}
	vals, errs, err := c.BatchGet(ctx, "m2", [][]byte{[]byte("b"), []byte("zz")})
	var ke *client.KeyError
	if err != nil || string(vals[0]) != "22" || !errors.As(errs[1], &ke) || ke.Code != client.NotFound {
		t.Fatalf("BatchGet: %q %v %v", vals, errs, err)
	}
	if q, err := c.Query(ctx, "m2", [][]byte{[]byte("a"), []byte("b"), []byte("x"), []byte("c")}); err != nil || q != 2 {
		t.Fatalf("Query: %d %v", q, err)
	}
	if errs, err := c.Pin(ctx, "m2", keys[:1]); err != nil || errs[0] != nil {
		t.Fatalf("Pin: %v %v", errs, err)
	}
	if errs, err := c.Unpin(ctx, "m2", keys[:2]); err != nil || errs[0] != nil || !errors.As(errs[1], &ke) || ke.Code != int64(store.CodeInvalidArgument) {
		t.Fatalf("Unpin: %v %v", errs, err)
	}
	if errs, err := c.WriteTokens(ctx, "m2", []int32{1, 2, 3}, 2, [][]byte{[]byte("x"), []byte("y")}, mem); err != nil || errs[1] != nil {
		t.Fatalf("WriteTokens: %v %v", errs, err)
	}
	if errs, err := c.Remove(ctx, "m2", keys[:1]); err != nil || errs[0] != nil {
		t.Fatalf("Remove: %v %v", errs, err)
	}
	if ex, err := c.Exist(ctx, "m2", keys); err != nil || ex[0] || !ex[1] {
		t.Fatalf("Exist: %v %v", ex, err)
	}
	if n, err := c.Clear(ctx, "m2"); err != nil || n != 4 {
		t.Fatalf("Clear: %d %v", n, err)
	}
	if st, err := c.Stat(ctx); err != nil || st.Blocks != 0 {
		t.Fatalf("Stat: %v %v", st, err)
	}
}
