package localapi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/gpu/layout"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// registerUnsealed registers a memfd created without MFD_ALLOW_SEALING,
// which the agent cannot seal against shrinking, and returns its pool id.
func registerUnsealed(t *testing.T, mempoolSocket string, size int) uint32 {
	t.Helper()
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: mempoolSocket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	msg := binary.LittleEndian.AppendUint64(nil, mempool.Magic)
	msg = binary.LittleEndian.AppendUint32(msg, 8)
	msg = append(msg, "unsealed"...)
	if _, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	var id [4]byte
	if _, err := io.ReadFull(c, id[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(id[:])
}

func TestKVCacheRegisterRefusesBadInput(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	e := newKVEnv(t, int(end)+4096)
	unsealed := registerUnsealed(t, e.cfg.MempoolPath(), int(end))
	with := func(f func(*layout.Layout)) layout.Layout { l := small; f(&l); return l }
	shifted := func(i int, off uint64) []uint64 { o := append([]uint64(nil), offs...); o[i] = off; return o }
	cudaRegions := func(n, handle int) *kvmeshv1.CudaIPCMemory {
		m := &kvmeshv1.CudaIPCMemory{}
		for range n {
			m.Regions = append(m.Regions, &kvmeshv1.CudaIPCRegion{Handle: make([]byte, handle)})
		}
		return m
	}
	host := func(l layout.Layout, o []uint64) *kvmeshv1.RegisterKVCacheRequest {
		return hostCache("", l, 0, e.pool.ID, o)
	}
	for _, tc := range []struct {
		name string
		req  *kvmeshv1.RegisterKVCacheRequest
		want codes.Code
	}{
		{"zero layers", host(with(func(l *layout.Layout) { l.Layers = 0 }), offs), codes.InvalidArgument},
		{"elem_bytes 3", host(with(func(l *layout.Layout) { l.ElemBytes = 3 }), offs), codes.InvalidArgument},
		{"no layout", &kvmeshv1.RegisterKVCacheRequest{Memory: host(small, offs).Memory}, codes.InvalidArgument},
		{"overflowing layout", host(with(func(l *layout.Layout) { l.Blocks, l.Heads = 1<<31, 1<<31 }), offs), codes.InvalidArgument},
		{"more blocks than the memory holds", host(with(func(l *layout.Layout) { l.Blocks = 9 }), offs), codes.InvalidArgument},
		{"value over --max-block-size", host(with(func(l *layout.Layout) { l.HeadDim = 1 << 16 }), offs), codes.InvalidArgument},
		{"an offset short", host(small, offs[1:]), codes.InvalidArgument},
		{"an offset too many", host(small, append(offs, end)), codes.InvalidArgument},
		{"region past the pool", host(small, shifted(len(offs)-1, end+4096-8)), codes.InvalidArgument},
		{"offset near 2^64", host(small, shifted(0, ^uint64(0)-3)), codes.InvalidArgument},
		{"overlapping regions", host(small, shifted(1, offs[0]+64)), codes.InvalidArgument},
		{"unknown pool", hostCache("", small, 0, 999, offs), codes.FailedPrecondition},
		{"pool 0", hostCache("", small, 0, 0, offs), codes.FailedPrecondition},
		{"unsealable memfd", hostCache("", small, 0, unsealed, offs), codes.FailedPrecondition},
		{"unknown namespace", hostCache("nope", small, 0, e.pool.ID, offs), codes.NotFound},
		{"no memory", &kvmeshv1.RegisterKVCacheRequest{Layout: protoLayout(small)}, codes.InvalidArgument},
		{"short IPC handle", &kvmeshv1.RegisterKVCacheRequest{Layout: protoLayout(small),
			Memory: &kvmeshv1.RegisterKVCacheRequest_Cuda{Cuda: cudaRegions(len(offs), 10)}}, codes.InvalidArgument},
		// Without -tags cuda (and on a host without a GPU) no handle opens.
		{"CUDA IPC here", &kvmeshv1.RegisterKVCacheRequest{Layout: protoLayout(small),
			Memory: &kvmeshv1.RegisterKVCacheRequest_Cuda{Cuda: cudaRegions(len(offs), 64)}}, codes.Unavailable},
	} {
		_, err := e.kv.RegisterKVCache(context.Background(), tc.req)
		if code(err) != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestKVCacheOpsRefuseBadInput(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	other := small
	other.HeadDim = 4 // another rank's shape: its stored values are half the size
	otherOffs, total := packed(other, end)
	e := newKVEnv(t, int(total)+4096)
	fill(e.pool.Mem, 4)
	id := e.register(t, small, offs)
	otherID := e.register(t, other, otherOffs)
	ctx := context.Background()
	if _, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: otherID, BlockIds: []uint32{0}, Hashes: []string{"other"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{"h0"}}); err != nil {
		t.Fatal(err)
	}
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9} // 3 blocks of 4
	before := bytes.Clone(e.pool.Mem)

	save := func(r *kvmeshv1.SaveBlocksRequest) error { _, err := e.kv.Save(ctx, r); return err }
	load := func(r *kvmeshv1.LoadBlocksRequest) error { _, err := e.kv.Load(ctx, r); return err }
	saveReq := func(r *kvmeshv1.SaveTokensRequest) error { _, err := e.kv.SaveRequest(ctx, r); return err }
	loadReq := func(r *kvmeshv1.LoadTokensRequest) error { _, err := e.kv.LoadRequest(ctx, r); return err }
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"save: unknown cache", save(&kvmeshv1.SaveBlocksRequest{CacheId: 999, BlockIds: []uint32{0}, Hashes: []string{"x"}}), codes.NotFound},
		{"save: block id past the cache", save(&kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{8}, Hashes: []string{"x"}}), codes.InvalidArgument},
		{"save: block id 2^32-1", save(&kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{^uint32(0)}, Hashes: []string{"x"}}), codes.InvalidArgument},
		{"save: more ids than hashes", save(&kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0, 1}, Hashes: []string{"x"}}), codes.InvalidArgument},
		{"save: empty hash", save(&kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{""}}), codes.InvalidArgument},
		{"save: hash too long for a key", save(&kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{string(make([]byte, 512))}}), codes.InvalidArgument},
		{"save: unknown durability", save(&kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{"x"}, Durability: 7}), codes.InvalidArgument},
		{"load: unknown cache", load(&kvmeshv1.LoadBlocksRequest{CacheId: 999, Hashes: []string{"h0"}, BlockIds: []uint32{1}}), codes.NotFound},
		{"load: block id past the cache", load(&kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h0"}, BlockIds: []uint32{8}}), codes.InvalidArgument},
		{"load: a destination twice", load(&kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h0", "h0"}, BlockIds: []uint32{2, 2}}), codes.InvalidArgument},
		{"load: more hashes than ids", load(&kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h0", "h0"}, BlockIds: []uint32{2}}), codes.InvalidArgument},
		{"load: stored by another layout", load(&kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"other"}, BlockIds: []uint32{2}}), codes.FailedPrecondition},
		{"save request: unknown cache", saveReq(&kvmeshv1.SaveTokensRequest{CacheId: 999, Tokens: tokens, BlockIds: []uint32{0, 1, 2}}), codes.NotFound},
		{"save request: too few block ids", saveReq(&kvmeshv1.SaveTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{0, 1}}), codes.InvalidArgument},
		{"save request: block id past the cache", saveReq(&kvmeshv1.SaveTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{0, 1, 9}}), codes.InvalidArgument},
		{"load request: unknown cache", loadReq(&kvmeshv1.LoadTokensRequest{CacheId: 999, Tokens: tokens, BlockIds: []uint32{0, 1, 2}}), codes.NotFound},
		{"load request: too many block ids", loadReq(&kvmeshv1.LoadTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{0, 1, 2, 3}}), codes.InvalidArgument},
		{"load request: a destination twice", loadReq(&kvmeshv1.LoadTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{1, 2, 1}}), codes.InvalidArgument},
		{"load request: block id past the cache", loadReq(&kvmeshv1.LoadTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{1, 2, 8}}), codes.InvalidArgument},
		{"load request: not saved", loadReq(&kvmeshv1.LoadTokensRequest{CacheId: id, Tokens: tokens, BlockIds: []uint32{1, 2, 3}}), codes.NotFound},
	} {
		if code(tc.err) != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if _, err := e.kv.UnregisterKVCache(ctx, &kvmeshv1.UnregisterKVCacheRequest{CacheId: 999}); code(err) != codes.NotFound {
		t.Errorf("unregister an unknown cache: %v", err)
	}
	if !bytes.Equal(e.pool.Mem, before) {
		t.Fatal("a refused request wrote into the pool")
	}
	// The agent keeps serving the same cache.
	l, err := e.kv.Load(ctx, &kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h0"}, BlockIds: []uint32{7}})
	if err != nil || l.Loaded != 1 || !bytes.Equal(blockBytes(small, e.pool.Mem, offs, 7), blockBytes(small, e.pool.Mem, offs, 0)) {
		t.Fatalf("a good Load after the bad ones: %v %v", l, err)
	}
}

// TestKVCacheUnregisterWhileInUse unregisters a cache under a stream of
// Saves and Loads: each call succeeds or fails cleanly, and once the
// unregistration returns, every call names the cache unknown.
func TestKVCacheUnregisterWhileInUse(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	e := newKVEnv(t, int(end))
	fill(e.pool.Mem, 5)
	id := e.register(t, small, offs)
	ctx := context.Background()
	if _, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{"h"}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if w%2 == 0 {
					_, err = e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0, 1, 2, 3}, Hashes: []string{"a", "b", "c", "d"}})
				} else {
					_, err = e.kv.Load(ctx, &kvmeshv1.LoadBlocksRequest{CacheId: id, Hashes: []string{"h"}, BlockIds: []uint32{uint32(4 + w)}})
				}
				if c := code(err); c != codes.OK && c != codes.NotFound && c != codes.FailedPrecondition {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := e.kv.UnregisterKVCache(ctx, &kvmeshv1.UnregisterKVCacheRequest{CacheId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{"x"}}); code(err) != codes.NotFound {
		t.Fatalf("Save after unregistering: %v", err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call racing the unregistration: %v", err)
	}
}

// TestKVCacheDroppedWithItsPool closes the connection that registered a
// host cache's pool: the cache goes with it and calls fail cleanly.
func TestKVCacheDroppedWithItsPool(t *testing.T) {
	t.Parallel()
	offs, end := packed(small, 0)
	e := newKVEnv(t, int(end))
	id := e.register(t, small, offs)
	ctx := context.Background()
	e.pool.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := e.kv.Save(ctx, &kvmeshv1.SaveBlocksRequest{CacheId: id, BlockIds: []uint32{0}, Hashes: []string{"x"}})
		if code(err) == codes.NotFound {
			break
		}
		if c := code(err); c != codes.OK && c != codes.FailedPrecondition || time.Now().After(deadline) {
			t.Fatalf("Save on a cache whose pool closed: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}
