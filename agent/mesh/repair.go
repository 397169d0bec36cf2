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
// them, asking each owner which it lacks in batches. With all (hand-off:
// this node is out of v) every local block goes; otherwise only blocks
// this node owns, so cache copies do not spread.
func (n *Node) push(v *view, op frame.Opcode, all bool) (int, error) {
	type nsOwner struct{ ns, owner string }
	todo := map[nsOwner][][]byte{}
	for _, b := range n.st.List() {
		id := blockID(b.NS, b.Key)
		if !all && !v.owns(id) {
			continue
		}
		for _, o := range v.peers(id) {
			k := nsOwner{b.NS, o}
			todo[k] = append(todo[k], b.Key)
		}
	}
	pushed, failed := 0, 0
	var last error
	for k, ks := range todo {
		for len(ks) > 0 {
			batch := ks[:min(len(ks), existBatch)]
			ks = ks[len(batch):]
			sizes, err := n.remoteSizes(v, k.owner, k.ns, batch)
			if err != nil {
				failed += len(batch)
				last = err
				continue
			}
			for i, key := range batch {
				if sizes[i] >= 0 {
					continue
				}
				buf, err := n.readLocal(k.ns, key)
				if err != nil {
					continue // gone meanwhile
				}
				if err := n.remotePut(v, k.owner, op, blockID(k.ns, key), [][]byte{buf}); err != nil {
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
