package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvmesh/kvmesh/agent"
	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

func init() { benches["local"] = benchLocal }

// benchLocal measures the engine-facing path: an in-process agent, one
// client, a registered memfd pool, blocks moved in batches by iovec; and,
// in the same run, redis-server on loopback with the same SET/GET workload.
func benchLocal(args []string) error {
	fs := flag.NewFlagSet("bench local", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	blockSize := fs.Int("block-size", 4<<20, "bytes per block")
	batch := fs.Int("batch", 16, "blocks per request")
	poolSize := fs.Int("pool", 256<<20, "bytes of the memfd pool (half source, half destination)")
	rounds := fs.Int("rounds", 8, "passes over the working set per measurement")
	redisBin := fs.String("redis-server", "redis-server", "redis-server binary (Debian's redis-server package)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	blocks := *poolSize / 2 / *blockSize / *batch * *batch
	if blocks == 0 {
		return fmt.Errorf("a %d-byte pool holds no two batches of %d-byte blocks", *poolSize, *blockSize)
	}
	working := uint64(blocks * *blockSize)

	dir, err := os.MkdirTemp("", "kvmesh-bench-local")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := agent.DefaultConfig()
	cfg.DataDir, cfg.Socket, cfg.AdminAddr = dir, filepath.Join(dir, "agent.sock"), ""
	cfg.MemCapacity, cfg.DiskCapacity = working+working/4, 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.Start(cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	c, err := client.Dial(cfg.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	pool, err := client.NewPool(cfg.MempoolPath(), "bench", *poolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	src, dst := pool.Mem[:working], pool.Mem[working:2*working]
	for i := range src {
		src[i] = byte(i * 31)
	}
	keys := make([][]byte, blocks)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "bench-%d", i)
	}

	// measure runs op over every batch, once to fault pages in, then timed.
	measure := func(op func(first int) error) (float64, error) {
		for first := 0; first < blocks; first += *batch {
			if err := op(first); err != nil {
				return 0, err
			}
		}
		start := time.Now()
		for r := 0; r < *rounds; r++ {
			for first := 0; first < blocks; first += *batch {
				if err := op(first); err != nil {
					return 0, err
				}
			}
		}
		return float64(working) * float64(*rounds) / time.Since(start).Seconds() / 1e9, nil
	}
	items := func(first int, base uint64) []client.PoolItem {
		out := make([]client.PoolItem, *batch)
		for i := range out {
			b := first + i
			out[i] = client.PoolItem{Key: keys[b], PoolID: pool.ID,
				Iovecs: []client.Iovec{{Offset: base + uint64(b**blockSize), Length: uint64(*blockSize)}}}
		}
		return out
	}
	ctx := context.Background()
	poolOp := func(get bool) func(int) error {
		return func(first int) error {
			var n []int64
			var err error
			if get {
				n, err = c.PoolBatchGet(ctx, "", items(first, working))
			} else {
				n, err = c.PoolBatchPut(ctx, "", items(first, 0), kvmeshv1.Durability_DURABILITY_MEMORY)
			}
			if err != nil {
				return err
			}
			for _, v := range n {
				if v != int64(*blockSize) {
					return fmt.Errorf("pool op result %d", v)
				}
			}
			return nil
		}
	}
	bs := *blockSize
	memcpy, _ := measure(func(first int) error {
		for b := first; b < first+*batch; b++ {
			copy(dst[b*bs:(b+1)*bs], src[b*bs:(b+1)*bs])
		}
		return nil
	})
	put, err := measure(poolOp(false))
	if err != nil {
		return err
	}
	get, err := measure(poolOp(true))
	if err != nil {
		return err
	}
	redisSet, redisGet, err := benchRedis(*redisBin, dir, keys, src, dst, bs, *batch, measure)
	if err != nil {
		return err
	}
	res := struct {
		MemcpyGBps   float64 `json:"memcpy_gbps"`
		PutGBps      float64 `json:"put_gbps"`
		GetGBps      float64 `json:"get_gbps"`
		RedisSetGBps float64 `json:"redis_set_gbps"`
		RedisGetGBps float64 `json:"redis_get_gbps"`
		BlockBytes   int     `json:"block_bytes"`
		Batch        int     `json:"batch"`
		Blocks       int     `json:"blocks"`
	}{memcpy, put, get, redisSet, redisGet, bs, *batch, blocks}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("local API, %d blocks of %d bytes in batches of %d: memcpy %.2f GB/s, put %.2f GB/s, get %.2f GB/s (%.2f× memcpy, %.2f× Redis GET); Redis SET %.2f GB/s, GET %.2f GB/s\n",
		blocks, bs, *batch, memcpy, put, get, get/memcpy, get/redisGet, redisSet, redisGet)
	return nil
}

// benchRedis runs redis-server on a free loopback port (no persistence) and
// measures pipelined SETs and GETs of the same blocks, each GET copied into
// its destination as a pool get would leave it.
func benchRedis(bin, dir string, keys [][]byte, src, dst []byte, bs, batch int,
	measure func(func(int) error) (float64, error)) (float64, float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--appendonly", "no", "--dir", dir, "--protected-mode", "no")
	if err := srv.Start(); err != nil {
		return 0, 0, fmt.Errorf("start %s (apt-get install redis-server): %w", bin, err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolSize: 1,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(ctx).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("redis-server on port %d did not answer", port)
		}
	}
	set, err := measure(func(first int) error {
		p := rdb.Pipeline()
		for b := first; b < first+batch; b++ {
			p.Set(ctx, string(keys[b]), src[b*bs:(b+1)*bs], 0)
		}
		_, err := p.Exec(ctx)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("redis SET: %w", err)
	}
	get, err := measure(func(first int) error {
		p := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, batch)
		for i := range cmds {
			cmds[i] = p.Get(ctx, string(keys[first+i]))
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		for i, cmd := range cmds {
			b := first + i
			v, err := cmd.Bytes()
			if err != nil || len(v) != bs {
				return fmt.Errorf("GET %s: %d bytes, %v", keys[b], len(v), err)
			}
			copy(dst[b*bs:(b+1)*bs], v)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("redis GET: %w", err)
	}
	return set, get, nil
}
