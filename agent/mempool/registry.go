// Package mempool holds the host pools that engines register on the agent's
// mempool socket: memfds mapped into the agent so that requests move bytes
// by (offset, length) iovecs instead of inside messages.
package mempool

import (
	"errors"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Errors of Acquire and Span; the services map them to their wire codes.
var (
	ErrUnknownPool = errors.New("no registered pool with this id")
	ErrOutOfRange  = errors.New("iovec outside the pool")
)

// Pool is one registered mapping. Requests hold its read lock while they
// touch its bytes, so unregistering (which takes the write lock before
// unmapping) waits for them and nothing is ever unmapped under a copy.
type Pool struct {
	ID   uint32
	Name string
	// Sealed is true when the memfd refuses to shrink (F_SEAL_SHRINK), so
	// no access to the mapping can fault: the condition for letting C code
	// (the swap core) touch it, since only Go code recovers from a fault.
	Sealed bool
	mu     sync.RWMutex
	mem    []byte        // nil once unmapped
	done   chan struct{} // closed when unregistering starts
}

// Size is the pool's length in bytes.
func (p *Pool) Size() uint64 { return uint64(len(p.mem)) }

// Span returns the pool's bytes [off, off+n). It checks without overflow,
// so offsets near 2^64 and lengths past the end are refused, never wrapped.
func (p *Pool) Span(off, n uint64) ([]byte, error) {
	size := uint64(len(p.mem))
	if off > size || n > size-off {
		return nil, ErrOutOfRange
	}
	return p.mem[off : off+n : off+n], nil
}

// Done is closed when the pool starts to unregister (its connection
// closed): holders of long-lived references to its bytes must let go, and
// the unmapping waits for the uses in flight.
func (p *Pool) Done() <-chan struct{} { return p.done }

// Release ends a use begun by Registry.Acquire.
func (p *Pool) Release() { p.mu.RUnlock() }

// Registry numbers and tracks the live pools.
type Registry struct {
	mu     sync.Mutex
	pools  map[uint32]*Pool
	nextID atomic.Uint32
}

// NewRegistry returns an empty registry; its first pool gets id 1.
func NewRegistry() *Registry { return &Registry{pools: make(map[uint32]*Pool)} }

// add takes ownership of a mapping and returns its pool, numbered 1, 2, 3…
// (0 never names a pool: SGLang treats it as "none").
func (r *Registry) add(name string, mem []byte, sealed bool) *Pool {
	p := &Pool{ID: r.nextID.Add(1), Name: name, Sealed: sealed, mem: mem, done: make(chan struct{})}
	r.mu.Lock()
	r.pools[p.ID] = p
	r.mu.Unlock()
	return p
}

// remove forgets the pool, waits for the requests using it, and unmaps it.
func (r *Registry) remove(p *Pool) {
	r.mu.Lock()
	delete(r.pools, p.ID)
	r.mu.Unlock()
	close(p.done)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mem != nil {
		unix.Munmap(p.mem)
		p.mem = nil
	}
}

// Acquire returns the live pool with the id, read-locked: the caller must
// Release it when done with its bytes.
func (r *Registry) Acquire(id uint32) (*Pool, error) {
	r.mu.Lock()
	p := r.pools[id]
	r.mu.Unlock()
	if p == nil {
		return nil, ErrUnknownPool
	}
	p.mu.RLock()
	if p.mem == nil { // unregistered between the lookup and the lock
		p.mu.RUnlock()
		return nil, ErrUnknownPool
	}
	return p, nil
}

// Len is the number of live pools.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pools)
}
