// Package keys validates block keys and derives them from token ids.
//
// A key names one immutable block inside a namespace. Engines that hash for
// themselves send their own keys; engines that would rather not send token
// ids, and the agent derives a chain of keys with the one function here, so
// that every process and every language agrees (docs/keys.md publishes the
// definition and test vectors).
package keys

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Limits on what a client may send.
const (
	MaxKeyLen       = 512
	MaxNamespaceLen = 128
)

// DefaultNamespace is used when a request names none.
const DefaultNamespace = "default"

// domain separates kvmesh's chain hash from any other use of SHA-256.
const domain = "kvmesh-chain-v1"

var (
	ErrEmptyKey     = errors.New("empty key")
	ErrKeyTooLong   = fmt.Errorf("key longer than %d bytes", MaxKeyLen)
	ErrBadNamespace = fmt.Errorf("namespace must be 1..%d bytes of [A-Za-z0-9._:/-]", MaxNamespaceLen)
)

// Validate reports whether key may name a block.
func Validate(key []byte) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > MaxKeyLen:
		return ErrKeyTooLong
	}
	return nil
}

// ValidateNamespace reports whether ns is a well-formed namespace name.
func ValidateNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > MaxNamespaceLen {
		return ErrBadNamespace
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '/' || c == '-'
		if !ok {
			return ErrBadNamespace
		}
	}
	return nil
}

// Chain derives the keys of the blocks of a token sequence:
//
//	key_i = hex(SHA-256("kvmesh-chain-v1" || u32le(len(ns)) || ns ||
//	                    u32le(len(key_{i-1})) || key_{i-1} ||
//	                    tokens of block i as int32 little-endian))
//
// with key_{-1} empty. Every full block of blockTokens tokens gets such a
// key. A tail shorter than blockTokens gets the chain key computed the same
// way over its own tokens, followed by ":partial:N" (N = tokens in it): the
// suffix keeps a partial block from ever being mistaken for a full one,
// and hashing the tail's tokens keeps two different tails of one prefix
// apart.
func Chain(ns string, tokens []int32, blockTokens int) ([][]byte, error) {
	if blockTokens <= 0 {
		return nil, fmt.Errorf("block size %d tokens: must be positive", blockTokens)
	}
	n := (len(tokens) + blockTokens - 1) / blockTokens
	out := make([][]byte, 0, n)
	var prev []byte
	buf := make([]byte, 0, len(domain)+8+len(ns)+2*sha256.Size+4*blockTokens)
	for start := 0; start < len(tokens); start += blockTokens {
		end := min(start+blockTokens, len(tokens))
		buf = append(buf[:0], domain...)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(ns)))
		buf = append(buf, ns...)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(prev)))
		buf = append(buf, prev...)
		for _, t := range tokens[start:end] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		sum := sha256.Sum256(buf)
		key := make([]byte, hex.EncodedLen(len(sum)), hex.EncodedLen(len(sum))+20)
		hex.Encode(key, sum[:])
		prev = key
		if end-start < blockTokens {
			key = append(key, ":partial:"...)
			key = strconv.AppendInt(key, int64(end-start), 10)
		}
		out = append(out, key)
	}
	return out, nil
}
