package mesh

import (
	"fmt"
	"sync"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/policy"
)

// Put stores the block here, then on its owners: the first c of its
// placement order, where c is R or more when the admission policy asked
// for extra replicas (view.copies). With durability replicated (the
// client's or the policy's floor) it writes to all c owners in parallel
// and returns once at least R of them hold it (this node counts when it is
// one), failing with UNAVAILABLE when fewer could take it, the local copy
// staying as a cache copy; otherwise the copies to owners happen in the
// background and the Put is acknowledged as the store acknowledges it.
func (n *Node) Put(ns string, key []byte, value [][]byte, opt store.PutOptions) error {
	replicated := opt.Durability == policy.DurableReplicated
	if replicated {
		opt.Durability = policy.DurableMemory // the store's part; replicas are ours
	}
	if opt.Admitted == nil {
		opt.Admitted = new(policy.Decision)
	}
	if err := n.st.Put(ns, key, value, opt); err != nil {
		return err
	}
	d := *opt.Admitted
	replicated = replicated || d.Ack >= policy.DurableReplicated // the policy's floor
	id := blockID(ns, key)
	v := n.view()
	owners := v.placed(id, v.copies(d.Replicas))
	if !replicated {
		if len(v.others(owners)) > 0 {
			select {
			case n.pushQueue <- queued{id: id, replicas: d.Replicas}:
			default:
				n.metrics.dropped.Inc()
			}
		}
		return nil
	}
	held := 0
	if contains(owners, v.self) {
		held = 1
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var last error
	for i, o := range owners {
		if o == v.self {
			continue
		}
		wg.Go(func() {
			err := n.putCopy(v, o, false, id, d.Replicas, value)
			n.countCopy(v, i, "put", err)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				last = err
				return
			}
			held++
		})
	}
	wg.Wait()
	if held < n.cfg.Replicas {
		n.metrics.replicas.WithLabelValues("short").Inc()
		return &store.Error{Code: store.CodeUnavailable,
			Msg: fmt.Sprintf("replicated: %d of %d owners hold the block (%d placed, %d live members; last failure: %v)", held, n.cfg.Replicas, len(owners), v.table.Len(), last)}
	}
	n.metrics.replicas.WithLabelValues("acked").Inc()
	return nil
}

// BatchPut puts each item independently.
func (n *Node) BatchPut(ns string, items []store.PutItem) []store.Result {
	out := make([]store.Result, len(items))
	for i, it := range items {
		out[i].Err = n.Put(ns, it.Key, it.Value, it.Opts)
		if out[i].Err == nil {
			for _, p := range it.Value {
				out[i].Bytes += uint64(len(p))
			}
		}
	}
	return out
}

// WriteTokens puts one block per blockTokens tokens under their chain
// keys, with the options store.WriteTokens gives.
func (n *Node) WriteTokens(ns string, tokens []int32, blockTokens int, blocks [][][]byte, d policy.Durability) ([]store.Result, error) {
	ks, err := n.st.ChainKeys(ns, tokens, blockTokens)
	if err != nil {
		return nil, err
	}
	if len(blocks) != len(ks) {
		return nil, &store.Error{Code: store.CodeInvalidArgument,
			Msg: fmt.Sprintf("%d tokens make %d blocks of %d, got %d values", len(tokens), len(ks), blockTokens, len(blocks))}
	}
	items := make([]store.PutItem, len(ks))
	for i, k := range ks {
		items[i] = store.PutItem{Key: k, Value: blocks[i], Opts: store.PutOptions{Durability: d,
			Tokens: uint32(min(blockTokens, len(tokens)-i*blockTokens)), ChainPos: uint32(i)}}
		if i > 0 {
			items[i].Opts.Parent = ks[i-1]
		}
	}
	return n.BatchPut(ns, items), nil
}

// Remove deletes the block here and on its owners; it fails with
// UNAVAILABLE if one of the key's R owners could not be reached (its copy
// may remain). The owners after them in placement order, which hold the
// copies a policy asked for beyond R, are asked too, at the same time, but
// a failure there is only logged: most of them never held the block.
func (n *Node) Remove(ns string, key []byte) error {
	if err := n.st.Remove(ns, key); err != nil {
		return err
	}
	v := n.view()
	id := blockID(ns, key)
	order := v.readOrder(id)
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, o := range order {
		if o != v.self {
			wg.Go(func() { errs[i] = n.remoteRemove(v, o, id) })
		}
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
		case i < v.replicas:
			return &store.Error{Code: store.CodeUnavailable, Msg: "owner " + order[i] + " kept its copy: " + err.Error()}
		default:
			n.log.Debug("mesh: remove at a further owner failed", "owner", order[i], "key", string(key), "err", err)
		}
	}
	return nil
}

// queued is a block waiting for the background copy to its owners.
type queued struct {
	id       []byte
	replicas uint8 // its admission decision's Replicas: how widely it is placed
}

// pushLoop copies blocks written with durability memory or disk to their
// owners, reading each back from the local store (the writer's buffers are
// gone by then); a block evicted or replaced meanwhile is pushed as it is
// now, or not at all.
func (n *Node) pushLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.done:
			return
		case q := <-n.pushQueue:
			ns, key, _ := parseID(q.id)
			v := n.view()
			buf, err := n.readLocal(ns, key)
			if err != nil {
				continue
			}
			for i, o := range v.placed(q.id, v.copies(q.replicas)) {
				if o == v.self {
					continue
				}
				err := n.putCopy(v, o, false, q.id, q.replicas, [][]byte{buf})
				n.countCopy(v, i, "background", err)
				if err != nil {
					n.log.Debug("mesh: background copy failed", "owner", o, "key", string(key), "err", err)
				}
			}
		}
	}
}

// readLocal reads a local block into a fresh buffer.
func (n *Node) readLocal(ns string, key []byte) ([]byte, error) {
	for {
		size, err := n.st.Size(ns, key)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		_, err = n.st.Get(ns, key, [][]byte{buf})
		if store.CodeOf(err) == store.CodeBufferSize {
			continue
		}
		return buf, err
	}
}
