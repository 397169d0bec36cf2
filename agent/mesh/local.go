package mesh

import "github.com/kvmesh/kvmesh/agent/store"

// The operations below act on this node's store only: pins hold local
// copies, Clear empties the local tiers, Stat describes them.

func (n *Node) Pin(ns string, key []byte) error   { return n.st.Pin(ns, key) }
func (n *Node) Unpin(ns string, key []byte) error { return n.st.Unpin(ns, key) }
func (n *Node) Clear(ns string) (int, error)      { return n.st.Clear(ns) }
func (n *Node) Stat() store.Stats                 { return n.st.Stat() }

// ChainKeys derives a token sequence's chain keys (docs/keys.md).
func (n *Node) ChainKeys(ns string, tokens []int32, blockTokens int) ([][]byte, error) {
	return n.st.ChainKeys(ns, tokens, blockTokens)
}
