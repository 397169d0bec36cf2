package mesh

import (
	"slices"

	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/placement"
)

// view is one immutable snapshot of the cluster: the placement over the
// live members that are not leaving, and where each member is reached. A
// new view replaces the old one on every membership event; readers load it
// once per operation, so an operation sees one consistent cluster.
type view struct {
	self     string
	replicas int
	table    *placement.Table
	addr     map[string]string // member name → data address
	names    []string          // the placed members, sorted
}

// samePlacement reports whether v and w place keys over the same members.
func (v *view) samePlacement(w *view) bool { return slices.Equal(v.names, w.names) }

// newView places keys over the live, non-leaving members (sorted by name,
// as gossip lists them), weighted by capacity, leaving out the members
// named in without.
func newView(self string, replicas int, members []gossip.Member, without ...string) *view {
	v := &view{self: self, replicas: replicas, addr: make(map[string]string, len(members))}
	var ps []placement.Member
	for _, m := range members {
		if m.State != gossip.StateAlive || m.Meta.Leaving || contains(without, m.Name) {
			continue
		}
		v.addr[m.Name] = m.Meta.Addr
		v.names = append(v.names, m.Name)
		ps = append(ps, placement.Member{Name: m.Name, Weight: float64(max(m.Meta.Capacity, 1))})
	}
	v.table = placement.New(ps)
	return v
}

func contains(names []string, n string) bool { return slices.Contains(names, n) }

// maxCopies bounds a block's placement: one owner and up to 16 more
// (policy.Decision.Replicas is at most 16).
const maxCopies = 1 + 16

// copies is how many owners a block is placed on when its admission
// decision asked for replicas remote copies beyond one (0: no opinion): R,
// or 1 + replicas when that is more, up to maxCopies. Never fewer than R,
// so every block keeps the R owners that durability replicated, repair and
// readers count on; a policy's extra copies go to the next owners in the
// same rendezvous order. Owners beyond the live members are not placed
// (the table has fewer).
func (v *view) copies(replicas uint8) int {
	return min(max(v.replicas, 1+int(replicas)), maxCopies)
}

// owners is the key's R owners, most preferred first.
func (v *view) owners(id []byte) []string { return v.table.Owners(id, v.replicas) }

// placed is the key's first c owners, most preferred first.
func (v *view) placed(id []byte, c int) []string { return v.table.Owners(id, c) }

// readOrder is the members a read of id may ask, in placement order: every
// owner a block of the key can have been placed on.
func (v *view) readOrder(id []byte) []string { return v.table.Owners(id, maxCopies) }

// walk goes through a key's read order, computing it beyond the first R
// owners only when a read gets that far (the first R of the longer order
// are the same members).
type walk struct {
	v     *view
	id    []byte
	order []string
	next  int // order[next:] not visited yet
	wide  bool
}

func (v *view) walk(id []byte) *walk { return &walk{v: v, id: id, order: v.owners(id)} }

// owner returns the next owner in the order; false when there is none.
func (w *walk) owner() (string, bool) {
	if w.next == len(w.order) && !w.wide {
		w.wide = true
		w.order = w.v.readOrder(w.id)
	}
	if w.next >= len(w.order) {
		return "", false
	}
	w.next++
	return w.order[w.next-1], true
}

// others is owners without this member.
func (v *view) others(owners []string) []string {
	out := make([]string, 0, len(owners))
	for _, o := range owners {
		if o != v.self {
			out = append(out, o)
		}
	}
	return out
}

// owns reports whether this member is one of the key's owners.
func (v *view) owns(id []byte) bool { return contains(v.owners(id), v.self) }
