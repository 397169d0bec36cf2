package store

import (
	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/policy"
)

// chain derives the keys of a token sequence's blocks (see keys.Chain).
func (s *Store) chain(ns string, tokens []int32, blockTokens int) (string, [][]byte, error) {
	ns, err := s.checkNS(ns)
	if err != nil {
		return ns, nil, err
	}
	ks, err := keys.Chain(ns, tokens, blockTokens)
	if err != nil {
		return ns, nil, errorf(CodeInvalidArgument, "%v", err)
	}
	return ns, ks, nil
}

// ChainKeys derives the keys of a token sequence's blocks in a namespace.
func (s *Store) ChainKeys(ns string, tokens []int32, blockTokens int) ([][]byte, error) {
	_, ks, err := s.chain(ns, tokens, blockTokens)
	return ks, err
}

// Match returns how many leading blocks of the token sequence are stored
// (a stored partial tail counts as one), warming them as Query does.
func (s *Store) Match(ns string, tokens []int32, blockTokens int) (int, error) {
	ns, ks, err := s.chain(ns, tokens, blockTokens)
	if err != nil {
		return 0, err
	}
	return s.Query(ns, ks)
}

// WriteTokens stores one block per blockTokens tokens (the last may be a
// partial tail) under their chain keys. blocks[i] holds block i's bytes as
// a vector; it must have one entry per block of the sequence.
func (s *Store) WriteTokens(ns string, tokens []int32, blockTokens int, blocks [][][]byte, d policy.Durability) ([]Result, error) {
	ns, ks, err := s.chain(ns, tokens, blockTokens)
	if err != nil {
		return nil, err
	}
	if len(blocks) != len(ks) {
		return nil, errorf(CodeInvalidArgument, "%d tokens make %d blocks of %d, got %d values",
			len(tokens), len(ks), blockTokens, len(blocks))
	}
	items := make([]PutItem, len(ks))
	for i, k := range ks {
		items[i] = PutItem{Key: k, Value: blocks[i], Opts: PutOptions{Durability: d,
			Tokens: uint32(min(blockTokens, len(tokens)-i*blockTokens)), ChainPos: uint32(i)}}
		if i > 0 {
			items[i].Opts.Parent = ks[i-1]
		}
	}
	return s.BatchPut(ns, items), nil
}

// ReadTokens reads the blocks of a token sequence into dsts (one vector per
// block).
func (s *Store) ReadTokens(ns string, tokens []int32, blockTokens int, dsts [][][]byte) ([]Result, error) {
	ns, ks, err := s.chain(ns, tokens, blockTokens)
	if err != nil {
		return nil, err
	}
	if len(dsts) != len(ks) {
		return nil, errorf(CodeInvalidArgument, "%d tokens make %d blocks of %d, got %d buffers",
			len(tokens), len(ks), blockTokens, len(dsts))
	}
	items := make([]GetItem, len(ks))
	for i, k := range ks {
		items[i] = GetItem{Key: k, Dst: dsts[i]}
	}
	return s.BatchGet(ns, items), nil
}
