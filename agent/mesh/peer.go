package mesh

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
)

var opNames = map[frame.Opcode]string{opExist: "exist", opGet: "get", opPut: "put", opHandoff: "handoff", opRemove: "remove"}

// call sends one request to member owner within PeerTimeout and hands the
// response to read, which must finish with it before call returns.
func (n *Node) call(v *view, owner string, c transport.Call, read func(*transport.Response) error) error {
	addr, ok := v.addr[owner]
	if !ok {
		return &frame.Error{Status: frame.StatusUnavailable, Msg: owner + " is not a live member"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.PeerTimeout)
	defer cancel()
	resp, err := n.ep.Do(ctx, addr, c)
	if err == nil {
		err = read(resp)
		resp.Close()
	}
	outcome := "ok"
	if err != nil {
		outcome = frame.StatusOf(err).String()
	}
	n.metrics.remote.WithLabelValues(opNames[c.Op], outcome).Inc()
	return err
}

// remoteSizes asks owner for the sizes of ks (-1: not held), in one round
// trip.
func (n *Node) remoteSizes(v *view, owner, ns string, ks [][]byte) ([]int64, error) {
	var sizes []int64
	err := n.call(v, owner, transport.Call{Op: opExist, Body: transport.Bytes(encodeBatch(ns, ks))}, func(r *transport.Response) error {
		if r.Length != uint64(8*len(ks)) {
			return &frame.Error{Status: frame.StatusBadFrame, Msg: "exist answer of the wrong length"}
		}
		b := make([]byte, r.Length)
		if err := r.Fill(b); err != nil {
			return err
		}
		var err error
		sizes, err = decodeSizes(b, len(ks))
		return err
	})
	return sizes, err
}

// remoteGet reads the block id from owner into dst, whose lengths must add
// up to the block's size (BUFFER_SIZE otherwise). dst holds verified bytes
// only when the error is nil.
func (n *Node) remoteGet(v *view, owner string, id []byte, dst [][]byte) (uint64, error) {
	var size uint64
	err := n.call(v, owner, transport.Call{Op: opGet, Key: id}, func(r *transport.Response) error {
		var total uint64
		for _, p := range dst {
			total += uint64(len(p))
		}
		if total != r.Length {
			return &store.Error{Code: store.CodeBufferSize, Msg: "buffers do not match the block's size"}
		}
		for _, p := range dst {
			if _, err := io.ReadFull(r, p); err != nil {
				return err
			}
		}
		if _, err := r.Read(nil); err != io.EOF {
			return errors.Join(errors.New("block failed its checksum or length"), err)
		}
		size = total
		return nil
	})
	return size, err
}

// vectorPayload is value's parts as one checksummed payload.
func vectorPayload(value [][]byte) transport.Payload {
	if len(value) == 1 {
		return transport.Bytes(value[0])
	}
	var sum uint32
	var n uint64
	rs := make([]io.Reader, len(value))
	for i, p := range value {
		sum = crc32.Update(sum, frame.Castagnoli, p)
		n += uint64(len(p))
		rs[i] = bytes.NewReader(p)
	}
	return transport.Payload{R: io.MultiReader(rs...), Len: n, CRC: sum}
}

// remotePut stores value on owner with op (opPut or opHandoff).
func (n *Node) remotePut(v *view, owner string, op frame.Opcode, id []byte, value [][]byte) error {
	return n.call(v, owner, transport.Call{Op: op, Key: id, Body: vectorPayload(value)},
		func(*transport.Response) error { return nil })
}

// remoteRemove deletes owner's copy of id.
func (n *Node) remoteRemove(v *view, owner string, id []byte) error {
	return n.call(v, owner, transport.Call{Op: opRemove, Key: id}, func(*transport.Response) error { return nil })
}
