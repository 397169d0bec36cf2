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

// owners is the key's R owners, most preferred first.
func (v *view) owners(id []byte) []string { return v.table.Owners(id, v.replicas) }

// owns reports whether this member is one of the key's owners.
func (v *view) owns(id []byte) bool { return contains(v.owners(id), v.self) }

// peers is the key's owners other than this member.
func (v *view) peers(id []byte) []string {
	var out []string
	for _, o := range v.owners(id) {
		if o != v.self {
			out = append(out, o)
		}
	}
	return out
}
