package store

import (
	"fmt"
	"testing"
)

// The memory tier against a plain copy of the same 4 MiB blocks; `kvmesh
// bench store` prints the same comparison as one JSON object.
const benchBlock, benchBlocks = 4 << 20, 32

func benchStore(b *testing.B) (*Store, [][]byte, [][]byte, [][]byte) {
	s, err := New(Config{MemCapacity: benchBlock * benchBlocks * 2, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	src, dst, ks := make([][]byte, benchBlocks), make([][]byte, benchBlocks), make([][]byte, benchBlocks)
	for i := range src {
		src[i], dst[i], ks[i] = value(i, benchBlock), make([]byte, benchBlock), fmt.Appendf(nil, "k%d", i)
		if err := s.Put("", ks[i], src[i:i+1], PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return s, src, dst, ks
}

func BenchmarkMemcpy4MiB(b *testing.B) {
	_, src, dst, _ := benchStore(b)
	b.SetBytes(benchBlock)
	i := 0
	for b.Loop() {
		copy(dst[i%benchBlocks], src[i%benchBlocks])
		i++
	}
}

func BenchmarkGet4MiB(b *testing.B) {
	s, _, dst, ks := benchStore(b)
	b.SetBytes(benchBlock)
	i := 0
	for b.Loop() {
		if _, err := s.Get("", ks[i%benchBlocks], dst[i%benchBlocks:i%benchBlocks+1]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkPut4MiB(b *testing.B) {
	s, src, _, ks := benchStore(b)
	b.SetBytes(benchBlock)
	i := 0
	for b.Loop() {
		if err := s.Put("", ks[i%benchBlocks], src[i%benchBlocks:i%benchBlocks+1], PutOptions{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
