package localapi

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/gpu/kvcache"
)

// kvEntry is one registered KV cache.
type kvEntry struct {
	id    uint64
	ns    string
	rank  int // tensor-parallel rank, part of every stored key
	cache *kvcache.Cache
	pool  *mempool.Pool // the host cache's pool; nil for device memory
	gone  chan struct{} // closed once unregistered
}

// kvCaches numbers the registered caches and ends their lives.
//
// Invariants: an entry leaves the map exactly once (drop), and its Cache is
// closed right after, which waits for the copies in flight. A host cache's
// copies run only while its pool is acquired, so the pool is never unmapped
// under one; when the pool starts to unregister, its caches are dropped.
type kvCaches struct {
	reg *mempool.Registry

	mu   sync.Mutex
	next uint64
	m    map[uint64]*kvEntry
}

func newKVCaches(reg *mempool.Registry) *kvCaches {
	return &kvCaches{reg: reg, m: make(map[uint64]*kvEntry)}
}

// add registers e under a fresh id (1, 2, 3…; 0 names none). A host cache
// is dropped when its pool's connection closes.
func (cs *kvCaches) add(e *kvEntry) uint64 {
	e.gone = make(chan struct{})
	cs.mu.Lock()
	cs.next++
	e.id = cs.next
	cs.m[e.id] = e
	cs.mu.Unlock()
	if e.pool != nil {
		go func() {
			select {
			case <-e.pool.Done():
				cs.drop(e.id)
			case <-e.gone:
			}
		}()
	}
	return e.id
}

// drop unregisters the cache with the id, waiting for its copies in
// flight; it reports whether there was one.
func (cs *kvCaches) drop(id uint64) bool {
	cs.mu.Lock()
	e := cs.m[id]
	delete(cs.m, id)
	cs.mu.Unlock()
	if e == nil {
		return false
	}
	close(e.gone)
	e.cache.Close()
	return true
}

// use returns the cache with the id for one call; release must be called
// when the call is done with it. For a host cache the pool is held
// meanwhile; a cache whose pool is gone is dropped and reported.
func (cs *kvCaches) use(id uint64) (e *kvEntry, release func(), err error) {
	cs.mu.Lock()
	e = cs.m[id]
	cs.mu.Unlock()
	if e == nil {
		return nil, nil, status.Errorf(codes.NotFound, "no KV cache %d is registered", id)
	}
	if e.pool == nil {
		return e, func() {}, nil
	}
	p, err := cs.reg.Acquire(e.pool.ID)
	if err != nil {
		cs.drop(id)
		return nil, nil, status.Errorf(codes.FailedPrecondition, "KV cache %d: its pool %d is unregistered (connection closed)", id, e.pool.ID)
	}
	return e, p.Release, nil
}
