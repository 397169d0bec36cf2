package mesh

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// settle is how long the repair pass waits after a membership event for
// more events (a join brings several) before it runs.
const settle = 500 * time.Millisecond

// existBatch bounds the keys of one exist round trip during a push.
const existBatch = 1024

// repairLoop runs a push pass after membership changes: a member that
// died leaves its keys with fewer than R copies, and a member that joined
// now owns keys it lacks.
func (n *Node) repairLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.done:
			return
		case <-n.repairKick:
		}
		select {
		case <-n.done:
			return
		case <-time.After(settle):
		}
		start := time.Now()
		pushed, err := n.push(n.view(), opPut, false)
		if pushed > 0 || err != nil {
			n.log.Info("mesh: repaired placement", "blocks_copied", pushed, "took", time.Since(start).Round(time.Millisecond), "err", err)
		}
	}
}

// push copies local blocks to those of their owners under v that lack
// them, asking each owner which it lacks in batches. A block's owners are
// the first v.copies of its placement order: R, or more when its admission
// decision (recorded on every copy) asked for extra replicas, so repair
// keeps extra replicas where readers look for them. With all (hand-off:
// this node is out of v) every local block goes; otherwise only blocks
// this node is one of those owners of, or the next one after them — a
// holder a join has just pushed one place down still hands its copy on
// (with R = 1 it may be the only holder) — so cache copies do not spread.
// A copy left beyond its block's owners is not copied again and ages out
// of that member by eviction.
func (n *Node) push(v *view, op frame.Opcode, all bool) (int, error) {
	type nsOwner struct{ ns, owner string }
	type copyOf struct {
		key      []byte
		replicas uint8
		pos      int // the owner's place in the block's placement order
	}
	todo := map[nsOwner][]copyOf{}
	for _, b := range n.st.List() {
		id := blockID(b.NS, b.Key)
		c := v.copies(b.Replicas)
		owners := v.placed(id, c+1)
		if !all && !contains(owners, v.self) {
			continue
		}
		for i, o := range owners[:min(c, len(owners))] {
			if o != v.self {
				k := nsOwner{b.NS, o}
				todo[k] = append(todo[k], copyOf{b.Key, b.Replicas, i})
			}
		}
	}
	pushed, failed := 0, 0
	var last error
	for k, cs := range todo {
		for len(cs) > 0 {
			batch := cs[:min(len(cs), existBatch)]
			cs = cs[len(batch):]
			ks := make([][]byte, len(batch))
			for i, c := range batch {
				ks[i] = c.key
			}
			sizes, err := n.remoteSizes(v, k.owner, k.ns, ks)
			if err != nil {
				failed += len(batch)
				last = err
				continue
			}
			for i, c := range batch {
				if sizes[i] >= 0 {
					continue
				}
				buf, err := n.readLocal(k.ns, c.key)
				if err != nil {
					continue // gone meanwhile
				}
				err = n.putCopy(v, k.owner, op == opHandoff, blockID(k.ns, c.key), c.replicas, [][]byte{buf})
				n.countCopy(v, c.pos, "repair", err)
				if err != nil {
					failed++
					last = err
					continue
				}
				pushed++
				n.metrics.pushed.Inc()
			}
		}
	}
	if failed > 0 {
		return pushed, errors.Join(fmt.Errorf("mesh: %d block copies failed", failed), last)
	}
	return pushed, nil
}
