package localapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent/store"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// serve runs the service on a Unix socket and returns a client for it.
func serve(t *testing.T) kvmeshv1.StoreClient {
	t.Helper()
	st, err := store.New(store.Config{MemCapacity: 4 << 20, DiskCapacity: 8 << 20, DiskDir: t.TempDir(),
		Namespaces: []string{"default", "m2"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	kvmeshv1.RegisterStoreServer(srv, New(st, "test"))
	go srv.Serve(ln)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); st.Close() })
	return kvmeshv1.NewStoreClient(conn)
}

func values(rs []*kvmeshv1.Result) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Value
	}
	return out
}

func TestBatchOpsReportPerKey(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	put, err := c.BatchPut(ctx, &kvmeshv1.BatchPutRequest{Items: []*kvmeshv1.Item{
		{Key: []byte("a"), Value: []byte("alpha")},
		{Key: nil, Value: []byte("no key")},
		{Key: []byte("b"), Value: []byte("beta")},
	}, Durability: kvmeshv1.Durability_DURABILITY_DISK})
	if err != nil {
		t.Fatal(err)
	}
	if got := values(put.Results); got[0] != 5 || got[1] != int64(store.CodeInvalidKey) || got[2] != 4 {
		t.Fatalf("BatchPut results %v", got)
	}
	if put.Results[1].Error == "" {
		t.Fatal("a failed key carries no message")
	}
	get, err := c.BatchGet(ctx, &kvmeshv1.KeysRequest{Keys: [][]byte{[]byte("b"), []byte("zz"), []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := values(get.Results); got[0] != 4 || got[1] != int64(store.CodeNotFound) || got[2] != 5 ||
		string(get.Values[0]) != "beta" || string(get.Values[2]) != "alpha" {
		t.Fatalf("BatchGet results %v values %q", got, get.Values)
	}
	pin, _ := c.Pin(ctx, &kvmeshv1.KeysRequest{Keys: [][]byte{[]byte("a"), []byte("zz")}})
	if got := values(pin.Results); got[0] != 0 || got[1] != int64(store.CodeNotFound) {
		t.Fatalf("Pin results %v", got)
	}
	if st, _ := c.Stat(ctx, &kvmeshv1.StatRequest{}); st.Pinned != 1 || st.Blocks != 2 || st.Version != "test" {
		t.Fatalf("Stat: %+v", st)
	}
	c.Unpin(ctx, &kvmeshv1.KeysRequest{Keys: [][]byte{[]byte("a")}})
	rm, _ := c.Remove(ctx, &kvmeshv1.KeysRequest{Keys: [][]byte{[]byte("a")}})
	if rm.Results[0].Value != 0 {
		t.Fatalf("Remove: %v", rm.Results[0])
	}
	q, _ := c.Query(ctx, &kvmeshv1.KeysRequest{Keys: [][]byte{[]byte("b"), []byte("a")}})
	ex, _ := c.Exist(ctx, &kvmeshv1.KeysRequest{Keys: [][]byte{[]byte("a"), []byte("b")}})
	if q.Present != 1 || ex.Exists[0] || !ex.Exists[1] {
		t.Fatalf("after Remove: Query %d, Exist %v", q.Present, ex.Exists)
	}
	cl, err := c.Clear(ctx, &kvmeshv1.ClearRequest{Namespace: "default"})
	if err != nil || cl.Removed != 1 {
		t.Fatalf("Clear: %v, %v", cl, err)
	}
}

func TestTokenOps(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	tokens := []int32{5, 6, 7, 8, 9, 10, 11}
	blocks := [][]byte{[]byte("first four"), []byte("tail")}
	w, err := c.WriteTokens(ctx, &kvmeshv1.WriteTokensRequest{Namespace: "m2", Tokens: tokens, BlockTokens: 4, Blocks: blocks})
	if err != nil || values(w.Results)[0] != 10 || values(w.Results)[1] != 4 {
		t.Fatalf("WriteTokens: %v %v", w, err)
	}
	m, _ := c.Match(ctx, &kvmeshv1.TokensRequest{Namespace: "m2", Tokens: tokens, BlockTokens: 4})
	if m.Present != 2 {
		t.Fatalf("Match = %d", m.Present)
	}
	if m, _ := c.Match(ctx, &kvmeshv1.TokensRequest{Namespace: "default", Tokens: tokens, BlockTokens: 4}); m.Present != 0 {
		t.Fatal("token chains leak across namespaces")
	}
	r, err := c.ReadTokens(ctx, &kvmeshv1.TokensRequest{Namespace: "m2", Tokens: tokens, BlockTokens: 4})
	if err != nil || !bytes.Equal(r.Values[0], blocks[0]) || !bytes.Equal(r.Values[1], blocks[1]) {
		t.Fatalf("ReadTokens: %v %v", r, err)
	}
}

func TestWholeRequestErrors(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"unknown namespace", func() error {
			_, err := c.Exist(ctx, &kvmeshv1.KeysRequest{Namespace: "nope", Keys: [][]byte{[]byte("k")}})
			return err
		}, codes.NotFound},
		{"unknown durability", func() error {
			_, err := c.Put(ctx, &kvmeshv1.PutRequest{Key: []byte("k"), Durability: 7})
			return err
		}, codes.InvalidArgument},
		{"block size 0", func() error {
			_, err := c.Match(ctx, &kvmeshv1.TokensRequest{Tokens: []int32{1}})
			return err
		}, codes.InvalidArgument},
		{"blocks do not match tokens", func() error {
			_, err := c.WriteTokens(ctx, &kvmeshv1.WriteTokensRequest{Tokens: []int32{1, 2, 3}, BlockTokens: 2, Blocks: [][]byte{{1}}})
			return err
		}, codes.InvalidArgument},
	}
	for _, tc := range tests {
		if got := status.Code(tc.call()); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Replicated durability is refused per key until the mesh exists.
	p, err := c.Put(ctx, &kvmeshv1.PutRequest{Key: []byte("k"), Value: []byte("v"), Durability: kvmeshv1.Durability_DURABILITY_REPLICATED})
	if err != nil || p.Result.Value != int64(store.CodeUnavailable) {
		t.Fatalf("replicated Put: %v %v", p, err)
	}
}
