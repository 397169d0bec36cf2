package mesh

import (
	"context"
	"io"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
)

// serve registers the remote tier's handlers: what other members may ask
// of this node's local store.
func (n *Node) serve() {
	n.ep.Handle(opExist, transport.HandlerFunc(n.serveExist))
	n.ep.Handle(opGet, transport.HandlerFunc(n.serveGet))
	n.ep.Handle(opPut, transport.HandlerFunc(n.servePut))
	n.ep.Handle(opHandoff, transport.HandlerFunc(n.servePut))
	n.ep.Handle(opRemove, transport.HandlerFunc(n.serveRemove))
	n.ep.Handle(opPlace, transport.HandlerFunc(n.servePlace)) // replicas.go
}

// storeStatus maps a store failure onto the wire: NOT_FOUND has its own
// status, the rest travel as unavailable with the store's message.
func storeStatus(err error) error {
	if store.IsNotFound(err) {
		return &frame.Error{Status: frame.StatusNotFound, Msg: err.Error()}
	}
	return &frame.Error{Status: frame.StatusUnavailable, Msg: err.Error()}
}

func (n *Node) serveExist(_ context.Context, req *transport.Request, w *transport.ResponseWriter) {
	body, err := io.ReadAll(req.Body) // bounded by the endpoint's MaxPayload, verified at EOF
	if err != nil {
		return // the endpoint answers with the body's failure
	}
	ns, ks, err := decodeBatch(body)
	if err != nil {
		w.Error(err)
		return
	}
	sizes := make([]int64, len(ks))
	for i, k := range ks {
		size, err := n.st.Size(ns, k)
		sizes[i] = int64(size)
		if err != nil {
			sizes[i] = -1
		}
	}
	w.Send(frame.StatusOK, transport.Bytes(encodeSizes(sizes)))
}

func (n *Node) serveGet(_ context.Context, req *transport.Request, w *transport.ResponseWriter) {
	ns, key, err := parseID(req.Key)
	if err != nil {
		w.Error(err)
		return
	}
	buf, err := n.readLocal(ns, key)
	if err != nil {
		w.Error(storeStatus(err))
		return
	}
	w.Send(frame.StatusOK, transport.Bytes(buf))
}

// servePut stores a replica. opPut needs this node to own the key;
// opHandoff, from a leaving member, needs it to own the key
// once the sender is left out.
func (n *Node) servePut(_ context.Context, req *transport.Request, w *transport.ResponseWriter) {
	ns, key, err := parseID(req.Key)
	if err != nil {
		w.Error(err)
		return
	}
	v := n.view()
	owner := v.owns(req.Key)
	if !owner && req.Op == opHandoff {
		owner = contains(newView(v.self, v.replicas, n.ms.Members(), req.Peer).owners(req.Key), v.self)
	}
	if !owner {
		w.Error(&frame.Error{Status: frame.StatusNotOwner, Msg: "not an owner of " + string(key)})
		return
	}
	// A copy placed on R owners: its writer's decision asked for no more.
	n.storeReplica(req, w, ns, key, store.PutOptions{Replica: true})
}

// storeReplica reads a replica's payload (its length bounded, its checksum
// checked by the endpoint) and stores it with opts.
func (n *Node) storeReplica(req *transport.Request, w *transport.ResponseWriter, ns string, key []byte, opts store.PutOptions) {
	if req.Body.Remaining() > n.st.MaxBlockSize() {
		w.Error(&frame.Error{Status: frame.StatusTooLarge, Msg: "block exceeds --max-block-size"})
		return
	}
	buf := make([]byte, req.Body.Remaining())
	if err := req.Body.Fill(buf); err != nil {
		return // length or checksum failed: the endpoint answers with it
	}
	if err := n.st.Put(ns, key, [][]byte{buf}, opts); err != nil {
		w.Error(storeStatus(err))
		return
	}
	w.Send(frame.StatusOK, transport.Payload{})
}

func (n *Node) serveRemove(_ context.Context, req *transport.Request, w *transport.ResponseWriter) {
	ns, key, err := parseID(req.Key)
	if err != nil {
		w.Error(err)
		return
	}
	if err := n.st.Remove(ns, key); err != nil {
		w.Error(storeStatus(err))
		return
	}
	w.Send(frame.StatusOK, transport.Payload{})
}
