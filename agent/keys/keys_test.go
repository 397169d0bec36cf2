package keys

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

type vector struct {
	Namespace   string   `json:"namespace"`
	BlockTokens int      `json:"block_tokens"`
	Tokens      []int32  `json:"tokens"`
	Keys        []string `json:"keys"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	data, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no vectors")
	}
	return vs
}

// The vectors were produced by the Python reference in docs/keys.md, so
// agreeing with them is agreeing across languages.
func TestChainMatchesPublishedVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadVectors(t) {
		got, err := Chain(v.Namespace, v.Tokens, v.BlockTokens)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(v.Keys) {
			t.Fatalf("%s/%d: %d keys, want %d", v.Namespace, v.BlockTokens, len(got), len(v.Keys))
		}
		for i := range got {
			if string(got[i]) != v.Keys[i] {
				t.Errorf("%s/%d key %d = %s, want %s", v.Namespace, v.BlockTokens, i, got[i], v.Keys[i])
			}
		}
	}
}

func TestDocsPublishTheVectors(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/keys.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range loadVectors(t)[:4] {
		for _, k := range v.Keys {
			if !strings.Contains(string(doc), k) {
				t.Errorf("docs/keys.md lacks key %s", k)
			}
		}
	}
}

func TestChainProperties(t *testing.T) {
	t.Parallel()
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	full, _ := Chain("default", tokens, 4)
	tests := []struct {
		name  string
		check func() bool
	}{
		{"a prefix has the same leading keys", func() bool {
			pre, _ := Chain("default", tokens[:8], 4)
			return string(pre[0]) == string(full[0]) && string(pre[1]) == string(full[1])
		}},
		{"the tail is marked partial with its token count", func() bool {
			return strings.HasSuffix(string(full[2]), ":partial:2")
		}},
		{"different tails of one prefix differ", func() bool {
			other, _ := Chain("default", []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 11}, 4)
			return string(other[2]) != string(full[2]) && string(other[1]) == string(full[1])
		}},
		{"namespaces separate chains", func() bool {
			other, _ := Chain("other", tokens, 4)
			return string(other[0]) != string(full[0])
		}},
		{"an early token changes every later key", func() bool {
			other, _ := Chain("default", []int32{0, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 4)
			return string(other[1]) != string(full[1]) && string(other[2]) != string(full[2])
		}},
		{"no tokens, no keys", func() bool {
			none, err := Chain("default", nil, 4)
			return err == nil && len(none) == 0
		}},
		{"block size must be positive", func() bool {
			_, err := Chain("default", tokens, 0)
			return err != nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if !tc.check() {
				t.Fail()
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  []byte
		want error
	}{
		{nil, ErrEmptyKey},
		{[]byte{}, ErrEmptyKey},
		{[]byte("k"), nil},
		{make([]byte, MaxKeyLen), nil},
		{make([]byte, MaxKeyLen+1), ErrKeyTooLong},
	}
	for _, tc := range tests {
		if got := Validate(tc.key); got != tc.want {
			t.Errorf("Validate(%d bytes) = %v, want %v", len(tc.key), got, tc.want)
		}
	}
	for _, ns := range []string{"", "has space", "semi;colon", strings.Repeat("n", MaxNamespaceLen+1)} {
		if ValidateNamespace(ns) == nil {
			t.Errorf("namespace %q accepted", ns)
		}
	}
	for _, ns := range []string{"default", "tenant-a/qwen2.5:7b", strings.Repeat("n", MaxNamespaceLen)} {
		if err := ValidateNamespace(ns); err != nil {
			t.Errorf("namespace %q refused: %v", ns, err)
		}
	}
}
