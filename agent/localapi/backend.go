package localapi

import (
	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/transport/gossip"
)

// Backend is the block store the local API serves. In single-node mode it
// is the node's *store.Store; in cluster mode a mesh-aware wrapper
// (agent/mesh) that answers from local tiers first and then from the keys'
// owners, and that replicates writes. Results and error codes are the
// store's either way, so clients cannot tell the two apart except by
// reach.
type Backend interface {
	Put(ns string, key []byte, value [][]byte, opt store.PutOptions) error
	Get(ns string, key []byte, dst [][]byte) (uint64, error)
	Size(ns string, key []byte) (uint64, error)
	BatchPut(ns string, items []store.PutItem) []store.Result
	Exist(ns string, ks [][]byte) ([]bool, error)
	Query(ns string, ks [][]byte) (int, error)
	Remove(ns string, key []byte) error
	Pin(ns string, key []byte) error
	Unpin(ns string, key []byte) error
	Clear(ns string) (int, error)
	ChainKeys(ns string, tokens []int32, blockTokens int) ([][]byte, error)
	Match(ns string, tokens []int32, blockTokens int) (int, error)
	WriteTokens(ns string, tokens []int32, blockTokens int, blocks [][][]byte, d policy.Durability) ([]store.Result, error)
	Stat() store.Stats
}

// Cluster is the mesh as the Members RPC reports it; nil in single-node
// mode.
type Cluster interface {
	// Self is this agent's member name.
	Self() string
	// Replicas is the replication factor R.
	Replicas() int
	// Members lists every member seen, departed ones included.
	Members() []gossip.Member
}

var _ Backend = (*store.Store)(nil)
