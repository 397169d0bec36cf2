// Package frame is the wire format of one kvmesh request or response on a
// QUIC stream: a fixed 16-byte header, a short variable field, then a payload
// whose exact length and crc32c (Castagnoli) checksum the header declares.
//
// Request and response share one layout (all integers big-endian):
//
//	offset  size  request                 response
//	0       1     Version (1)             Version (1)
//	1       1     Opcode                  Status
//	2       2     key length              message length
//	4       8     payload length          payload length
//	12      4     payload crc32c          payload crc32c
//	16      n     key                     message (UTF-8 error detail)
//	16+n    len   payload                 payload
//
// After the payload the sender closes its side of the stream: one request
// per stream, one response per request. A receiver treats a payload that ends
// early, runs past its declared length or fails its checksum as an error of
// that one request, never of the connection.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// ALPN is the TLS application protocol of kvmesh's QUIC transport. A peer
// offering any other protocol (another major version) is refused during the
// handshake.
const ALPN = "kvmesh/1"

// Version is the frame format version written in every header. A header of
// another version is answered with StatusBadVersion.
const Version uint8 = 1

const (
	// HeaderLen is the size of the fixed part of a header.
	HeaderLen = 16
	// MaxFieldLen bounds the key of a request and the message of a
	// response; a namespaced block key is at most 512 + namespace bytes.
	MaxFieldLen = 1024
)

// Castagnoli is the crc32c table every payload checksum uses.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the crc32c of b, as a header declares it.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Castagnoli) }

// Opcode names the operation of a request. Opcodes below 0x80 are
// idempotent reads: a client may send them as 0-RTT early data and a server
// may serve them before the handshake is confirmed, because a replayed read
// changes nothing. Opcodes from 0x80 up change state and are never served
// before the handshake completes.
type Opcode uint8

// OpGossip opens a memberlist state-sync stream: the header carries no key
// and no payload, and the rest of the stream, both ways, belongs to
// memberlist.
const OpGossip Opcode = 0xFF

// Idempotent reports whether op is a read that is safe to replay.
func (op Opcode) Idempotent() bool { return op < 0x80 }

// Header is the fixed part of a frame plus its variable field. Code is the
// Opcode of a request or the Status of a response; Field is the key of a
// request or the error message of a response.
type Header struct {
	Code     uint8
	Field    []byte
	Length   uint64
	Checksum uint32
}

// Append appends h's encoding to dst. It fails only when Field is longer
// than MaxFieldLen.
func (h Header) Append(dst []byte) ([]byte, error) {
	if len(h.Field) > MaxFieldLen {
		return dst, fmt.Errorf("%w: field of %d bytes exceeds %d", ErrBadFrame, len(h.Field), MaxFieldLen)
	}
	var fixed [HeaderLen]byte
	fixed[0] = Version
	fixed[1] = h.Code
	binary.BigEndian.PutUint16(fixed[2:], uint16(len(h.Field)))
	binary.BigEndian.PutUint64(fixed[4:], h.Length)
	binary.BigEndian.PutUint32(fixed[12:], h.Checksum)
	dst = append(dst, fixed[:]...)
	return append(dst, h.Field...), nil
}

// ReadHeader reads one header from r. A header of another version, a field
// over MaxFieldLen or a payload over maxLength is an *Error with the status
// to answer; a header cut short is ErrBadFrame wrapping the read error.
func ReadHeader(r io.Reader, maxLength uint64) (Header, error) {
	var fixed [HeaderLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, fmt.Errorf("%w: header cut short: %w", ErrBadFrame, err)
		}
		return Header{}, err
	}
	if fixed[0] != Version {
		return Header{}, &Error{Status: StatusBadVersion, Msg: fmt.Sprintf("frame version %d, want %d", fixed[0], Version)}
	}
	h := Header{
		Code:     fixed[1],
		Length:   binary.BigEndian.Uint64(fixed[4:]),
		Checksum: binary.BigEndian.Uint32(fixed[12:]),
	}
	n := int(binary.BigEndian.Uint16(fixed[2:]))
	if n > MaxFieldLen {
		return Header{}, &Error{Status: StatusBadFrame, Msg: fmt.Sprintf("field of %d bytes exceeds %d", n, MaxFieldLen)}
	}
	if h.Length > maxLength {
		return Header{}, &Error{Status: StatusTooLarge, Msg: fmt.Sprintf("payload of %d bytes exceeds %d", h.Length, maxLength)}
	}
	if n > 0 {
		h.Field = make([]byte, n)
		if _, err := io.ReadFull(r, h.Field); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return Header{}, fmt.Errorf("%w: field cut short: %w", ErrBadFrame, err)
			}
			return Header{}, err
		}
	}
	return h, nil
}
