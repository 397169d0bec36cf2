package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/kvmesh/kvmesh/agent/store"
)

func init() { benches["store"] = benchStore }

// benchStore measures the memory tier's Put and Get of 4 MiB blocks against
// a plain copy of the same bytes, in one process and one run.
func benchStore(args []string) error {
	fs := flag.NewFlagSet("bench store", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	blockSize := fs.Int("block-size", 4<<20, "bytes per block")
	blocks := fs.Int("blocks", 64, "distinct blocks (the working set)")
	rounds := fs.Int("rounds", 8, "passes over the working set per measurement")
	if err := fs.Parse(args); err != nil {
		return err
	}
	working := uint64(*blockSize) * uint64(*blocks)
	st, err := store.New(store.Config{MemCapacity: working + working/4, MaxBlockSize: uint64(*blockSize),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer st.Close()

	src := make([][]byte, *blocks)
	dst := make([][]byte, *blocks)
	keys := make([][]byte, *blocks)
	for i := range src {
		src[i], dst[i] = make([]byte, *blockSize), make([]byte, *blockSize)
		for j := range src[i] {
			src[i][j] = byte(i + j)
		}
		keys[i] = fmt.Appendf(nil, "bench-%d", i)
	}
	measure := func(op func(i int) error) (float64, error) {
		for i := range src { // warm-up: fault in every page once
			if err := op(i); err != nil {
				return 0, err
			}
		}
		start := time.Now()
		for r := 0; r < *rounds; r++ {
			for i := range src {
				if err := op(i); err != nil {
					return 0, err
				}
			}
		}
		return float64(working) * float64(*rounds) / time.Since(start).Seconds() / 1e9, nil
	}
	memcpy, _ := measure(func(i int) error { copy(dst[i], src[i]); return nil })
	put, err := measure(func(i int) error { return st.Put("", keys[i], src[i:i+1], store.PutOptions{}) })
	if err != nil {
		return err
	}
	get, err := measure(func(i int) error { _, err := st.Get("", keys[i], dst[i:i+1]); return err })
	if err != nil {
		return err
	}
	res := struct {
		MemcpyGBps float64 `json:"memcpy_gbps"`
		GetGBps    float64 `json:"get_gbps"`
		PutGBps    float64 `json:"put_gbps"`
		BlockBytes int     `json:"block_bytes"`
		Blocks     int     `json:"blocks"`
	}{memcpy, get, put, *blockSize, *blocks}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("memory tier, %d blocks of %d bytes: memcpy %.2f GB/s, get %.2f GB/s (%.2f×), put %.2f GB/s (%.2f×)\n",
		res.Blocks, res.BlockBytes, memcpy, get, get/memcpy, put, put/memcpy)
	return nil
}
