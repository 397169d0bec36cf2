package localapi

import (
	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/agent/store"
)

// iovec is a span of a registered pool, as both protocols name one.
type iovec struct{ off, n uint64 }

// poolBuf resolves a pool id and iovecs to slices of the live mapping. On
// success the pool is held (read-locked) and must be released once the
// bytes are no longer touched; on failure nothing is held and the error is
// a *store.Error with INVALID_ARGUMENT, UNKNOWN_POOL or OUT_OF_RANGE.
func poolBuf(reg *mempool.Registry, id uint32, iovs []iovec) (*mempool.Pool, [][]byte, error) {
	if id == 0 {
		return nil, nil, &store.Error{Code: store.CodeInvalidArgument, Msg: "pool id 0 names no pool"}
	}
	if len(iovs) == 0 {
		return nil, nil, &store.Error{Code: store.CodeInvalidArgument, Msg: "no iovec"}
	}
	if reg == nil {
		return nil, nil, &store.Error{Code: store.CodeUnknownPool, Msg: "this agent has no mempool socket"}
	}
	p, err := reg.Acquire(id)
	if err != nil {
		return nil, nil, &store.Error{Code: store.CodeUnknownPool, Msg: "pool not registered (or its connection closed)"}
	}
	vec := make([][]byte, len(iovs))
	for i, v := range iovs {
		if vec[i], err = p.Span(v.off, v.n); err != nil {
			p.Release()
			return nil, nil, &store.Error{Code: store.CodeOutOfRange,
				Msg: "iovec outside the pool"}
		}
	}
	return p, vec, nil
}

// prefix is the first size bytes of vec, or false if vec holds fewer.
func prefix(vec [][]byte, size uint64) ([][]byte, bool) {
	var out [][]byte
	for _, b := range vec {
		if size == 0 {
			break
		}
		n := min(uint64(len(b)), size)
		out = append(out, b[:n])
		size -= n
	}
	return out, size == 0
}

// putPool stores the concatenation of a pool buffer under key.
func putPool(st Backend, reg *mempool.Registry, ns string, key []byte, id uint32, iovs []iovec,
	opt store.PutOptions) (uint64, error) {
	p, vec, err := poolBuf(reg, id, iovs)
	if err != nil {
		return 0, err
	}
	defer p.Release()
	if err := st.Put(ns, key, vec, opt); err != nil {
		return 0, err
	}
	var n uint64
	for _, b := range vec {
		n += uint64(len(b))
	}
	return n, nil
}

// getPoolExact reads the block under key into a pool buffer whose length
// must equal the block's (BUFFER_SIZE otherwise).
func getPoolExact(st Backend, reg *mempool.Registry, ns string, key []byte, id uint32, iovs []iovec) (uint64, error) {
	p, vec, err := poolBuf(reg, id, iovs)
	if err != nil {
		return 0, err
	}
	defer p.Release()
	return st.Get(ns, key, vec)
}

// getPoolPrefix reads the block under key into the start of a pool buffer
// at least as long as the block, retrying if the key is replaced by a block
// of another size between sizing and reading.
func getPoolPrefix(st Backend, reg *mempool.Registry, ns string, key []byte, id uint32, iovs []iovec) (uint64, error) {
	p, vec, err := poolBuf(reg, id, iovs)
	if err != nil {
		return 0, err
	}
	defer p.Release()
	for {
		size, err := st.Size(ns, key)
		if err != nil {
			return 0, err
		}
		dst, ok := prefix(vec, size)
		if !ok {
			return 0, &store.Error{Code: store.CodeBufferSize, Msg: "buffer smaller than the block"}
		}
		n, err := st.Get(ns, key, dst)
		if store.CodeOf(err) == store.CodeBufferSize {
			continue
		}
		return n, err
	}
}
