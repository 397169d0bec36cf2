package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func equalMembers(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("node-%02d", i), Weight: 1}
	}
	return ms
}

func keys(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "model-a/%08x_key_0", i)
	}
	return out
}

// The hash is part of the protocol (clients in other languages compute
// owners too): these owner lists, computed independently from the formula
// in the package comment, must never change.
func TestPublishedVectors(t *testing.T) {
	table := New([]Member{{"a", 1}, {"b", 1}, {"c", 2}})
	for key, want := range map[string][]string{
		"":        {"c", "b", "a"},
		"block-1": {"a", "b", "c"},
		"block-2": {"c", "a", "b"},
		"block-3": {"b", "c", "a"},
	} {
		if got := table.Owners([]byte(key), 3); !slices.Equal(got, want) {
			t.Errorf("Owners(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestDeterministicAcrossMemberOrder(t *testing.T) {
	ms := equalMembers(12)
	ms[3].Weight = 2.5
	shuffled := slices.Clone(ms)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	a, b := New(ms), New(shuffled)
	for _, k := range keys(2000) {
		if oa, ob := a.Owners(k, 3), b.Owners(k, 3); !slices.Equal(oa, ob) {
			t.Fatalf("key %q: %v vs %v", k, oa, ob)
		}
	}
}

func TestOwnersAreDistinctAndBounded(t *testing.T) {
	table := New(equalMembers(5))
	for _, k := range keys(500) {
		o := table.Owners(k, 3)
		if len(o) != 3 || len(slices.Compact(slices.Sorted(slices.Values(o)))) != 3 {
			t.Fatalf("Owners(%q, 3) = %v", k, o)
		}
		if o[0] != table.Primary(k) || !slices.Equal(table.Owners(k, 2), o[:2]) {
			t.Fatalf("owner lists of %q do not nest: %v", k, o)
		}
	}
	if o := table.Owners([]byte("k"), 9); len(o) != 5 {
		t.Fatalf("Owners(k, 9) over 5 members = %v", o)
	}
	if New(nil).Owners([]byte("k"), 2) != nil || New(nil).Primary([]byte("k")) != "" || table.Owners([]byte("k"), 0) != nil {
		t.Fatal("an empty table or r = 0 must give no owners")
	}
	if New([]Member{{"a", 0}, {"b", -1}, {"c", 1}}).Len() != 1 {
		t.Fatal("members of non-positive weight must own nothing")
	}
}

func TestWeightsRespected(t *testing.T) {
	table := New([]Member{{"small", 1}, {"medium", 2}, {"large", 3}})
	const n = 60000
	count := map[string]int{}
	for _, k := range keys(n) {
		count[table.Primary(k)]++
	}
	for name, w := range map[string]float64{"small": 1, "medium": 2, "large": 3} {
		share, want := float64(count[name])/n, w/6
		if share < want*0.95 || share > want*1.05 {
			t.Errorf("%s owns %.3f of keys, want %.3f ± 5%%", name, share, want)
		}
	}
}

// A join moves about 1/N of the keys, all of them to the new member, and
// changes every key's owner list only by inserting the new member.
func TestJoinMovesOnlyItsShare(t *testing.T) {
	const n, r = 16, 3
	before := New(equalMembers(n - 1))
	after := New(equalMembers(n))
	joined := fmt.Sprintf("node-%02d", n-1)
	ks := keys(100000)
	moved := 0
	for _, k := range ks {
		ob, oa := before.Owners(k, r), after.Owners(k, r)
		if ob[0] != oa[0] {
			moved++
			if oa[0] != joined {
				t.Fatalf("key %q moved from %s to %s, not to the joining member", k, ob[0], oa[0])
			}
		}
		if i := slices.Index(oa, joined); i >= 0 {
			oa = slices.Delete(slices.Clone(oa), i, i+1)
			ob = ob[:r-1]
		}
		if !slices.Equal(oa, ob) {
			t.Fatalf("key %q: owners %v became %v", k, before.Owners(k, r), after.Owners(k, r))
		}
	}
	frac := float64(moved) / float64(len(ks))
	if ideal := 1.0 / n; frac > 1.2*ideal || frac < 0.8*ideal {
		t.Fatalf("a join moved %.4f of keys, ideal %.4f", frac, ideal)
	}
}

func TestLeaveMovesOnlyTheLeaversKeys(t *testing.T) {
	ms := equalMembers(10)
	before := New(ms)
	after := New(append(slices.Clone(ms[:4]), ms[5:]...))
	for _, k := range keys(20000) {
		if p := before.Primary(k); p != ms[4].Name && after.Primary(k) != p {
			t.Fatalf("key %q moved from %s though %s left", k, p, ms[4].Name)
		}
	}
}

func BenchmarkOwners(b *testing.B) {
	table := New(equalMembers(64))
	key := []byte("model-a/0123456789abcdef0123456789abcdef_key_0")
	b.ReportAllocs()
	for b.Loop() {
		table.Owners(key, 3)
	}
}
