package mesh

import (
	"errors"
	"sync"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/transport/frame"
)

// missing is the fallback error of a key no tier holds.
var errMissing = &store.Error{Code: store.CodeNotFound, Msg: "no block under the key on this node or its owners"}

// fallBack reports whether a local read's failure sends the read to the
// owners: the key is not here, or its copy here was corrupt and dropped.
func fallBack(err error) bool {
	c := store.CodeOf(err)
	return c == store.CodeNotFound || c == store.CodeCorrupt
}

// remoteFailure is the error of a read no owner could answer: NOT_FOUND
// when every owner said so, UNAVAILABLE naming the last failure otherwise.
func remoteFailure(last error) error {
	if last == nil || errors.Is(last, frame.ErrNotFound) {
		return errMissing
	}
	return &store.Error{Code: store.CodeUnavailable, Msg: "no owner answered: " + last.Error()}
}

// Size is the size of the nearest copy: local, else the first owner that
// holds the key.
func (n *Node) Size(ns string, key []byte) (uint64, error) {
	size, err := n.st.Size(ns, key)
	if !fallBack(err) {
		return size, err
	}
	v := n.view()
	var last error
	for _, o := range v.peers(blockID(ns, key)) {
		sizes, err := n.remoteSizes(v, o, ns, [][]byte{key})
		if err == nil && sizes[0] >= 0 {
			return uint64(sizes[0]), nil
		}
		last = err
	}
	return 0, remoteFailure(last)
}

// Get fills dst from the nearest copy: local memory, local disk, then the
// owners in placement order, failing over on error or timeout.
func (n *Node) Get(ns string, key []byte, dst [][]byte) (uint64, error) {
	got, err := n.st.Get(ns, key, dst)
	if !fallBack(err) {
		return got, err
	}
	v := n.view()
	var last error
	for _, o := range v.peers(blockID(ns, key)) {
		got, err := n.remoteGet(v, o, blockID(ns, key), dst)
		if err == nil || store.CodeOf(err) == store.CodeBufferSize {
			return got, err
		}
		last = err
	}
	return 0, remoteFailure(last)
}

// Exist reports, per key, whether a copy is held here or by one of the
// key's owners: one batched round trip per owner, all owners at once.
func (n *Node) Exist(ns string, ks [][]byte) ([]bool, error) {
	found, err := n.st.Exist(ns, ks)
	if err != nil {
		return nil, err
	}
	v := n.view()
	batches := map[string][]int{} // owner → indexes of the keys to ask it about
	for i, k := range ks {
		if !found[i] {
			for _, o := range v.peers(blockID(ns, k)) {
				batches[o] = append(batches[o], i)
			}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for o, idx := range batches {
		wg.Go(func() {
			asked := make([][]byte, len(idx))
			for j, i := range idx {
				asked[j] = ks[i]
			}
			sizes, err := n.remoteSizes(v, o, ns, asked)
			if err != nil {
				n.log.Debug("mesh: exist failed at an owner", "owner", o, "err", err)
				return
			}
			mu.Lock()
			for j, i := range idx {
				found[i] = found[i] || sizes[j] >= 0
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return found, nil
}

// Query is the length of the longest leading run of ks held anywhere in
// the cluster. The local run is looked up first (and warmed as the
// prefetch policy says); only the keys after it go to the owners.
func (n *Node) Query(ns string, ks [][]byte) (int, error) {
	run, err := n.st.Query(ns, ks)
	if err != nil || run == len(ks) {
		return run, err
	}
	found, err := n.Exist(ns, ks[run:])
	if err != nil {
		return 0, err
	}
	for _, f := range found {
		if !f {
			break
		}
		run++
	}
	return run, nil
}

// Match is Query over a token sequence's chain keys.
func (n *Node) Match(ns string, tokens []int32, blockTokens int) (int, error) {
	ks, err := n.st.ChainKeys(ns, tokens, blockTokens)
	if err != nil {
		return 0, err
	}
	return n.Query(ns, ks)
}
