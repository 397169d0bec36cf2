package mesh

import (
	"encoding/binary"
	"errors"

	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/transport/frame"
)

// The remote tier's opcodes. Below 0x80: reads, safe to replay as 0-RTT.
const (
	// opExist asks which of a batch of keys the peer holds. Body: a
	// batch (encodeBatch); response: one little-endian int64 per key,
	// the block's size or -1.
	opExist frame.Opcode = 0x01
	// opGet reads one block. Key: blockID; response payload: the block,
	// its crc32c computed from the stored bytes.
	opGet frame.Opcode = 0x02
	// opPolicyModule reads a stored policy module. Key: its hex SHA-256;
	// response payload: the module's bytes (the fetcher checks the
	// digest). StatusNotFound when this node does not hold it.
	opPolicyModule frame.Opcode = 0x03
	// opPut stores a replica. Key: blockID; body: the block. Refused with
	// StatusNotOwner unless the peer owns the key.
	opPut frame.Opcode = 0x80
	// opHandoff is opPut from a leaving member: accepted if
	// the peer owns the key once the sender is left out.
	opHandoff frame.Opcode = 0x81
	// opRemove deletes the peer's copy, owned or not. Key: blockID.
	opRemove frame.Opcode = 0x82
)

// blockID is how a (namespace, key) travels and is placed: uvarint length
// of the namespace, the namespace, then the key. Every member places the
// same bytes, so all agree on owners. "" is the default namespace, as in
// the store: a Put in "" and the repair of the block the store lists under
// "default" must place alike.
func blockID(ns string, key []byte) []byte {
	if ns == "" {
		ns = keys.DefaultNamespace
	}
	b := binary.AppendUvarint(make([]byte, 0, 2+len(ns)+len(key)), uint64(len(ns)))
	b = append(b, ns...)
	return append(b, key...)
}

var errBadID = &frame.Error{Status: frame.StatusBadFrame, Msg: "malformed block id"}

// parseID splits a blockID.
func parseID(id []byte) (string, []byte, error) {
	n, w := binary.Uvarint(id)
	if w <= 0 || n > uint64(len(id)-w) {
		return "", nil, errBadID
	}
	return string(id[w : w+int(n)]), id[w+int(n):], nil
}

// encodeBatch is a namespace and keys: the namespace as in blockID, then
// per key a uvarint length and the key.
func encodeBatch(ns string, ks [][]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ns)))
	b = append(b, ns...)
	for _, k := range ks {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return b
}

// decodeBatch reverses encodeBatch; the keys alias b.
func decodeBatch(b []byte) (string, [][]byte, error) {
	ns, rest, err := parseID(b)
	if err != nil {
		return "", nil, err
	}
	// parseID took everything after the namespace as the key: split it.
	var ks [][]byte
	for len(rest) > 0 {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", nil, errors.Join(errBadID, errors.New("truncated key"))
		}
		ks = append(ks, rest[w:w+int(n)])
		rest = rest[w+int(n):]
	}
	return ns, ks, nil
}

// encodeSizes and decodeSizes carry opExist's answer.
func encodeSizes(sizes []int64) []byte {
	b := make([]byte, 8*len(sizes))
	for i, s := range sizes {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(s))
	}
	return b
}

func decodeSizes(b []byte, want int) ([]int64, error) {
	if len(b) != 8*want {
		return nil, &frame.Error{Status: frame.StatusBadFrame, Msg: "exist answer of the wrong length"}
	}
	out := make([]int64, want)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out, nil
}
