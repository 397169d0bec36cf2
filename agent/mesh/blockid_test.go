package mesh

import (
	"bytes"
	"testing"

	"github.com/kvmesh/kvmesh/agent/keys"
)

// A Put in "" is placed by blockID("", key) but repaired from the store's
// list, which names the namespace "default": both must place alike.
func TestBlockIDResolvesTheDefaultNamespace(t *testing.T) {
	if a, b := blockID("", []byte("k")), blockID(keys.DefaultNamespace, []byte("k")); !bytes.Equal(a, b) {
		t.Fatalf("blockID(\"\", k) = %q, blockID(%q, k) = %q", a, keys.DefaultNamespace, b)
	}
	ns, key, err := parseID(blockID("", []byte("k")))
	if err != nil || ns != keys.DefaultNamespace || string(key) != "k" {
		t.Fatalf("parseID(blockID(\"\", k)) = %q, %q, %v", ns, key, err)
	}
}
