package localapi_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvmesh/kvmesh/agent"
	"github.com/kvmesh/kvmesh/client"
	"github.com/kvmesh/kvmesh/proto/sglang/runtime/hicache"
)

// sglangEnv is an in-process agent, an SGLang-protocol client on its
// socket, and one registered pool.
type sglangEnv struct {
	rpc  hicache.StorageServerClient
	pool *client.Pool
	cfg  agent.Config
}

func newSGLang(t *testing.T) *sglangEnv {
	t.Helper()
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.DataDir, cfg.Socket, cfg.AdminAddr = dir, filepath.Join(dir, "agent.sock"), ""
	cfg.MemCapacity, cfg.DiskCapacity = 64<<20, 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pool, err := client.NewPool(cfg.MempoolPath(), "sglang-host-pool", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return &sglangEnv{rpc: hicache.NewStorageServerClient(conn), pool: pool, cfg: cfg}
}

func iov(off uint64, n uint32) *hicache.Iovec { return &hicache.Iovec{Offset: off, Length: n} }

func xfer(id string, pool int32, iovs ...*hicache.Iovec) *hicache.Transfer {
	return &hicache.Transfer{Id: []byte(id), PoolId: pool, Iovec: iovs}
}

// SGLang's flow end to end: multi-iovec puts, Exist with misses, gets into
// other offsets, byte-exact.
func TestSGLangPutExistGet(t *testing.T) {
	t.Parallel()
	e := newSGLang(t)
	ctx := context.Background()
	mem, id := e.pool.Mem, int32(e.pool.ID)
	for i := range 64 << 10 {
		mem[i] = byte(i * 7)
	}
	put, err := e.rpc.BatchPut(ctx, &hicache.BatchPutRequest{Puts: []*hicache.Transfer{
		xfer("k0", id, iov(0, 1000), iov(5000, 24), iov(2000, 3000)),
		xfer("k1", id, iov(40000, 4096)),
	}})
	if err != nil || len(put.Results) != 2 || put.Results[0] != 0 || put.Results[1] != 0 {
		t.Fatalf("BatchPut: %v %v", put, err)
	}
	ex, err := e.rpc.Exist(ctx, &hicache.ExistRequest{Id: [][]byte{[]byte("k0"), []byte("missing"), []byte("k1")}})
	if err != nil || len(ex.Results) != 3 || !ex.Results[0] || ex.Results[1] || !ex.Results[2] {
		t.Fatalf("Exist: %v %v", ex, err)
	}
	want0 := append(append(bytes.Clone(mem[0:1000]), mem[5000:5024]...), mem[2000:5000]...)
	want1 := bytes.Clone(mem[40000:44096])
	get, err := e.rpc.BatchGet(ctx, &hicache.BatchGetRequest{Gets: []*hicache.Transfer{
		xfer("k0", id, iov(100000, 24), iov(200000, 4000)),
		xfer("k1", id, iov(300000, 4096)),
	}})
	if err != nil || len(get.Results) != 2 || get.Results[0] != 0 || get.Results[1] != 0 {
		t.Fatalf("BatchGet: %v %v", get, err)
	}
	got0 := append(bytes.Clone(mem[100000:100024]), mem[200000:204000]...)
	if !bytes.Equal(got0, want0) || !bytes.Equal(mem[300000:304096], want1) {
		t.Fatal("BatchGet bytes differ from what was put")
	}
}

// Every failure is per item, as the gRPC code number SGLang's reference
// server uses, and never touches memory outside the pool.
func TestSGLangErrors(t *testing.T) {
	t.Parallel()
	e := newSGLang(t)
	ctx := context.Background()
	id := int32(e.pool.ID)
	size := uint64(len(e.pool.Mem))
	if r, err := e.rpc.BatchPut(ctx, &hicache.BatchPutRequest{Puts: []*hicache.Transfer{xfer("stored", id, iov(0, 4096))}}); err != nil || r.Results[0] != 0 {
		t.Fatalf("BatchPut: %v %v", r, err)
	}
	other, err := client.NewPool(e.cfg.MempoolPath(), "closed", 4096)
	if err != nil {
		t.Fatal(err)
	}
	closedID := int32(other.ID)
	other.Close()

	cases := []struct {
		name string
		get  bool
		t    *hicache.Transfer
		want codes.Code
	}{
		{"get unknown key", true, xfer("absent", id, iov(0, 4096)), codes.NotFound},
		{"get length mismatch", true, xfer("stored", id, iov(0, 4095)), codes.InvalidArgument},
		{"get no iovec", true, xfer("stored", id), codes.InvalidArgument},
		{"get pool 0", true, xfer("stored", 0, iov(0, 4096)), codes.InvalidArgument},
		{"get unknown pool", true, xfer("stored", 999, iov(0, 4096)), codes.FailedPrecondition},
		{"get negative pool", true, xfer("stored", -1, iov(0, 4096)), codes.FailedPrecondition},
		{"get closed pool", true, xfer("stored", closedID, iov(0, 4096)), codes.FailedPrecondition},
		{"get past the pool", true, xfer("stored", id, iov(size-100, 4096)), codes.OutOfRange},
		{"get offset near 2^64", true, xfer("stored", id, iov(math.MaxUint64-1000, 4096)), codes.OutOfRange},
		{"get second iovec out", true, xfer("stored", id, iov(0, 96), iov(size, 4000)), codes.OutOfRange},
		{"put past the pool", false, xfer("new", id, iov(size, 1)), codes.OutOfRange},
		{"put offset+length overflow", false, xfer("new", id, iov(math.MaxUint64-10, 100)), codes.OutOfRange},
		{"put no iovec", false, xfer("new", id), codes.InvalidArgument},
		{"put pool 0", false, xfer("new", 0, iov(0, 10)), codes.InvalidArgument},
		{"put unknown pool", false, xfer("new", 999, iov(0, 10)), codes.FailedPrecondition},
		{"put closed pool", false, xfer("new", closedID, iov(0, 10)), codes.FailedPrecondition},
		{"put empty key", false, xfer("", id, iov(0, 10)), codes.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var results []int32
			if tc.get {
				r, err := e.rpc.BatchGet(ctx, &hicache.BatchGetRequest{Gets: []*hicache.Transfer{tc.t}})
				if err != nil {
					t.Fatal(err)
				}
				results = r.Results
			} else {
				r, err := e.rpc.BatchPut(ctx, &hicache.BatchPutRequest{Puts: []*hicache.Transfer{tc.t}})
				if err != nil {
					t.Fatal(err)
				}
				results = r.Results
			}
			if len(results) != 1 || results[0] != int32(tc.want) {
				t.Fatalf("results %v, want [%d] (%v)", results, tc.want, tc.want)
			}
		})
	}
	t.Run("failed puts stored nothing", func(t *testing.T) {
		t.Parallel()
		ex, err := e.rpc.Exist(ctx, &hicache.ExistRequest{Id: [][]byte{[]byte("new")}})
		if err != nil || ex.Results[0] {
			t.Fatalf("Exist: %v %v", ex, err)
		}
	})
}

// A pool unregistered while requests stream through it: each item either
// completes or fails FAILED_PRECONDITION; the agent never faults.
func TestSGLangPoolClosedMidRequest(t *testing.T) {
	t.Parallel()
	e := newSGLang(t)
	ctx := context.Background()
	id := int32(e.pool.ID)
	if r, err := e.rpc.BatchPut(ctx, &hicache.BatchPutRequest{Puts: []*hicache.Transfer{xfer("b", id, iov(0, 256<<10))}}); err != nil || r.Results[0] != 0 {
		t.Fatalf("BatchPut: %v %v", r, err)
	}
	gets := make([]*hicache.Transfer, 64)
	for i := range gets {
		gets[i] = xfer("b", id, iov(uint64(i%4)*(256<<10), 256<<10))
	}
	var wg sync.WaitGroup
	failed := make(chan int32, 1024)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
				r, err := e.rpc.BatchGet(ctx, &hicache.BatchGetRequest{Gets: gets})
				if err != nil {
					t.Error(err)
					return
				}
				last := r.Results[len(r.Results)-1]
				for _, c := range r.Results {
					if c != 0 && c != int32(codes.FailedPrecondition) {
						t.Errorf("result %d", c)
					}
				}
				if last != 0 {
					failed <- last
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	e.pool.Close()
	wg.Wait()
	if len(failed) == 0 {
		t.Fatal("requests kept succeeding after the pool closed")
	}
}
