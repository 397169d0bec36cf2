package mesh

import (
	"context"
	"fmt"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
)

// Extra replicas. The admission policy's Decision.Replicas asks for a
// block to be placed on 1 + Replicas owners; when that is more than R
// (view.copies), the copies beyond R go to the next owners in the key's
// rendezvous order. Those owners are not among the key's R owners, so a
// plain opPut would be refused with StatusNotOwner: copies of a widened
// placement travel as opPlace, which names the placement, and every copy
// records it (store.PutOptions.Replica), so that repair on any holder
// keeps the same placement. Blocks placed on R owners keep using opPut and
// opHandoff, which every build understands.

// opPlace stores a copy of a block whose placement is wider than R. Key:
// one placement byte, then the blockID; the byte's low five bits are the
// writer's Decision.Replicas (0..16) and its top bit marks a hand-off from
// a leaving member. Accepted if the peer is one of the first
// view.copies(replicas) owners, counting without the sender for a
// hand-off; StatusNotOwner otherwise. Body: the block.
const opPlace frame.Opcode = 0x88

const (
	placeHandoff  = 0x80 // placement byte: a hand-off
	placeReplicas = 0x1F // placement byte: Decision.Replicas
)

func init() {
	if _, dup := opNames[opPlace]; dup {
		panic(fmt.Sprintf("mesh: opcode %#x named twice", uint8(opPlace)))
	}
	opNames[opPlace] = "place"
}

// placeKey is opPlace's key.
func placeKey(replicas uint8, handoff bool, id []byte) []byte {
	b := replicas & placeReplicas
	if handoff {
		b |= placeHandoff
	}
	return append([]byte{b}, id...)
}

// parsePlaceKey reverses placeKey.
func parsePlaceKey(k []byte) (replicas uint8, handoff bool, id []byte, err error) {
	if len(k) < 1 || k[0]&^(placeHandoff|placeReplicas) != 0 || k[0]&placeReplicas > maxCopies-1 {
		return 0, false, nil, &frame.Error{Status: frame.StatusBadFrame, Msg: "malformed placement"}
	}
	return k[0] & placeReplicas, k[0]&placeHandoff != 0, k[1:], nil
}

// putCopy stores a copy of block id on owner, one of the first
// v.copies(replicas) owners of the key: with opPut (opHandoff when
// handoff) when that placement is the R owners, with opPlace when the
// policy widened it.
func (n *Node) putCopy(v *view, owner string, handoff bool, id []byte, replicas uint8, value [][]byte) error {
	if v.copies(replicas) <= v.replicas {
		op := opPut
		if handoff {
			op = opHandoff
		}
		return n.remotePut(v, owner, op, id, value)
	}
	return n.call(v, owner, transport.Call{Op: opPlace, Key: placeKey(replicas, handoff, id), Body: vectorPayload(value)},
		func(*transport.Response) error { return nil })
}

// countCopy counts a copy written to the i-th owner (0-based) of a
// placement, when that owner is beyond the key's R: an extra replica.
func (n *Node) countCopy(v *view, i int, path string, err error) {
	if i < v.replicas {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	n.metrics.extra.WithLabelValues(path, outcome).Inc()
}

// servePlace stores a copy of a block with a widened placement; the copy
// records the writer's decision, so repair here keeps the placement.
func (n *Node) servePlace(_ context.Context, req *transport.Request, w *transport.ResponseWriter) {
	replicas, handoff, id, err := parsePlaceKey(req.Key)
	if err != nil {
		w.Error(err)
		return
	}
	ns, key, err := parseID(id)
	if err != nil {
		w.Error(err)
		return
	}
	v := n.view()
	c := v.copies(replicas)
	owner := contains(v.placed(id, c), v.self)
	if !owner && handoff {
		owner = contains(newView(v.self, v.replicas, n.ms.Members(), req.Peer).placed(id, c), v.self)
	}
	if !owner {
		w.Error(&frame.Error{Status: frame.StatusNotOwner, Msg: fmt.Sprintf("not one of the %d owners of %s", c, key)})
		return
	}
	n.storeReplica(req, w, ns, key, store.PutOptions{Replica: true, Replicas: replicas})
}
