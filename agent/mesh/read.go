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

// Reads that miss locally walk the key's owners in placement order
// (view.readOrder), this node's own missed copy counting as an answer when
// it is one of them. An owner that says it lacks the block is an answer; an
// owner that fails (unreachable, timed out) is not, and the next one in the
// order is asked in its place. The walk ends at the first copy, or once R
// owners have answered: blocks are placed on the first R owners at least,
// so a healthy cluster costs what it did before extra replicas, while a
// block with extra copies survives the loss of its first owners (its extra
// owners are the next ones in the same order).

// Size is the size of the nearest copy: local, else the first owner in
// placement order that holds the key.
func (n *Node) Size(ns string, key []byte) (uint64, error) {
	size, err := n.st.Size(ns, key)
	if !fallBack(err) {
		return size, err
	}
	var found uint64
	done, last := n.fromOwners(n.view(), blockID(ns, key), func(v *view, o string) (bool, bool, error) {
		sizes, err := n.remoteSizes(v, o, ns, [][]byte{key})
		if err != nil {
			return false, false, err
		}
		if sizes[0] < 0 {
			return false, true, nil
		}
		found = uint64(sizes[0])
		return true, false, nil
	})
	if done {
		return found, nil
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
	id := blockID(ns, key)
	done, last := n.fromOwners(n.view(), id, func(v *view, o string) (bool, bool, error) {
		g, err := n.remoteGet(v, o, id, dst)
		if err == nil || store.CodeOf(err) == store.CodeBufferSize {
			got = g
			return true, false, err
		}
		return false, errors.Is(err, frame.ErrNotFound), err
	})
	if done {
		return got, last
	}
	return 0, remoteFailure(last)
}

// fromOwners walks id's owners as described above, asking each other
// owner in turn until ask reports done (its error then is the answer) or R
// owners have answered. ask reports miss when the owner answered that it
// lacks the block; any other error is a failure and the next owner is asked
// in its place. Without done, last is the last owner's error, for
// remoteFailure.
func (n *Node) fromOwners(v *view, id []byte, ask func(v *view, owner string) (done, miss bool, err error)) (done bool, last error) {
	answered := 0
	for w := v.walk(id); answered < v.replicas; {
		o, ok := w.owner()
		if !ok {
			break
		}
		if o == v.self {
			answered++ // its local tiers missed before the walk
			continue
		}
		done, miss, err := ask(v, o)
		if done {
			return true, err
		}
		if last = err; miss {
			answered++
		}
	}
	return false, last
}

// Exist reports, per key, whether a copy is held here or by one of the
// key's owners: one batched round trip per owner, all owners at once,
// first to the R owners of every key, then, for keys some of whose owners
// failed, to the next owners in their order in place of those.
func (n *Node) Exist(ns string, ks [][]byte) ([]bool, error) {
	found, err := n.st.Exist(ns, ks)
	if err != nil {
		return nil, err
	}
	v := n.view()
	type probe struct {
		*walk
		answered int  // owners that said whether they hold it
		done     bool // no owner left to ask
	}
	probes := map[int]*probe{}
	for i, k := range ks {
		if !found[i] {
			probes[i] = &probe{walk: v.walk(blockID(ns, k))}
		}
	}
	for len(probes) > 0 {
		batches := map[string][]int{} // owner → indexes of the keys to ask it about
		for i, p := range probes {
			for need := v.replicas - p.answered; need > 0; need-- {
				o, ok := p.owner()
				if !ok {
					p.done = true
					break
				}
				if o == v.self {
					p.answered++ // its local store missed above
					continue
				}
				batches[o] = append(batches[o], i)
			}
		}
		if len(batches) == 0 {
			break
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
					probes[i].answered++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		for i, p := range probes {
			if found[i] || p.answered >= v.replicas || p.done {
				delete(probes, i)
			}
		}
	}
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
