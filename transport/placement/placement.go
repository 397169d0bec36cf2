// Package placement decides which members own a key: weighted rendezvous
// (highest random weight) hashing over the live members. Every member with
// the same member list computes the same owners, with no coordination; a
// join or leave moves only the keys whose owners it changes — on average
// the joining member's share of the total weight.
//
// The score of member m for key k, published so that clients in any
// language can compute owners:
//
//	hk    = FNV-1a-64(k)
//	hm    = FNV-1a-64(m's name)
//	h     = fmix64(hk XOR hm)                  (MurmurHash3's 64-bit finaliser)
//	u     = ((h >> 11) + 0.5) / 2^53           (uniform in (0, 1))
//	score = weight(m) / -ln(u)
//
// Owners are the members in descending score order, ties broken by name.
// The member with the highest score is the primary; a key's owner list for
// replication factor R is the first R. With these scores the chance that
// member m comes first is exactly weight(m) / Σ weights. (Members on
// different CPU architectures could disagree on a key whose two best scores
// differ in the last bit of the logarithm; agents of one cluster run one
// build.)
package placement

import (
	"cmp"
	"math"
	"slices"
)

// Member is a candidate owner.
type Member struct {
	Name string
	// Weight is the member's relative share of keys (its capacity); a
	// member of weight 0 or less owns nothing.
	Weight float64
}

// Table is an immutable placement over a set of members; build a new one
// when membership changes. It is safe for concurrent use.
type Table struct {
	members []member // sorted by name
}

type member struct {
	name   string
	hash   uint64
	weight float64
}

// New builds a Table. Members of non-positive weight are left out; for a
// name listed twice the last entry counts.
func New(members []Member) *Table {
	byName := make(map[string]float64, len(members))
	for _, m := range members {
		byName[m.Name] = m.Weight
	}
	t := &Table{members: make([]member, 0, len(byName))}
	for name, w := range byName {
		if w > 0 && !math.IsInf(w, 0) {
			t.members = append(t.members, member{name: name, hash: hashBytes([]byte(name)), weight: w})
		}
	}
	slices.SortFunc(t.members, func(a, b member) int { return cmp.Compare(a.name, b.name) })
	return t
}

// Len is the number of members that can own keys.
func (t *Table) Len() int { return len(t.members) }

// Owners returns the first r owners of key, most preferred first (fewer if
// the table has fewer members).
func (t *Table) Owners(key []byte, r int) []string {
	r = min(r, len(t.members))
	if r <= 0 {
		return nil
	}
	type scored struct {
		score float64
		name  string
	}
	hk := hashBytes(key)
	top := make([]scored, 0, r+1)
	for _, m := range t.members {
		s := scored{score(hk, m.hash, m.weight), m.name}
		if len(top) == r && !better(s.score, s.name, top[r-1].score, top[r-1].name) {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, s, func(a, b scored) int {
			if better(a.score, a.name, b.score, b.name) {
				return -1
			}
			return 1
		})
		top = slices.Insert(top, i, s)
		if len(top) > r {
			top = top[:r]
		}
	}
	out := make([]string, len(top))
	for i, s := range top {
		out[i] = s.name
	}
	return out
}

// Primary is the first owner of key, or "" for an empty table.
func (t *Table) Primary(key []byte) string {
	if o := t.Owners(key, 1); len(o) == 1 {
		return o[0]
	}
	return ""
}

func better(sa float64, na string, sb float64, nb string) bool {
	if sa != sb {
		return sa > sb
	}
	return na < nb
}

func score(hk, hm uint64, weight float64) float64 {
	u := (float64(fmix64(hk^hm)>>11) + 0.5) / (1 << 53)
	return weight / -math.Log(u)
}

// hashBytes is FNV-1a, 64-bit.
func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// fmix64 is MurmurHash3's finaliser: every input bit affects every output
// bit, which FNV alone does not give for inputs differing only at the end.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb93e185a4f53
	k ^= k >> 33
	return k
}
