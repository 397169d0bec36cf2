package mesh

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/transport/localmesh"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// askReplicas is an admission policy that asks every block for replicas
// remote copies beyond one, acknowledged no earlier than ack.
type askReplicas struct {
	replicas uint8
	ack      policy.Durability
}

func (a askReplicas) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for range inserts {
		dst = append(dst, policy.Decision{Replicas: a.replicas, Ack: a.ack})
	}
	return dst
}

// holders names the nodes whose local store holds key.
func holders(nodes []*Node, key []byte) []string {
	var out []string
	for _, nd := range nodes {
		if _, err := nd.st.Size("default", key); err == nil {
			out = append(out, nd.Self())
		}
	}
	slices.Sort(out)
	return out
}

// placedOn is the first c owners of key as nd sees them, sorted.
func placedOn(nd *Node, key []byte, c int) []string {
	o := nd.view().placed(blockID("default", key), c)
	slices.Sort(o)
	return o
}

// dropCacheCopy removes the writer's own copy of key unless it is one of
// the key's first c owners, so that only placed copies remain.
func dropCacheCopy(t *testing.T, w *Node, key []byte, c int) {
	t.Helper()
	if !slices.Contains(placedOn(w, key, c), w.Self()) {
		if err := w.st.Remove("default", key); err != nil {
			t.Fatal(err)
		}
	}
}

func TestViewCopies(t *testing.T) {
	v := &view{replicas: 2}
	for replicas, want := range map[uint8]int{0: 2, 1: 2, 2: 3, 5: 6, 16: 17} {
		if got := v.copies(replicas); got != want {
			t.Errorf("R=2, Replicas=%d: %d owners, want %d", replicas, got, want)
		}
	}
	for _, r := range []uint8{0, 3, 16} {
		for _, h := range []bool{false, true} {
			id := blockID("default", []byte("k"))
			gr, gh, gid, err := parsePlaceKey(placeKey(r, h, id))
			if err != nil || gr != r || gh != h || !bytes.Equal(gid, id) {
				t.Fatalf("placeKey(%d, %v) round trip: %d %v %q %v", r, h, gr, gh, gid, err)
			}
		}
	}
	for _, bad := range [][]byte{nil, {17}, {0x40}} {
		if _, _, _, err := parsePlaceKey(bad); err == nil {
			t.Errorf("parsePlaceKey(%x) accepted", bad)
		}
	}
}

// With R = 1 and an admission policy asking for 2 more replicas, blocks
// land on their first 3 owners (synchronously when the policy's floor is
// replicated, in the background otherwise); with the native policy on R.
// Once the primary owner of such a block dies, a member that never held
// it still reads it from the next owner, Exist and Query find it, and
// repair restores 3 copies among the living.
func TestAdmissionReplicasPlacement(t *testing.T) {
	nodes := cluster(t, 4, 1)
	w := nodes[0]
	const n = 24
	key := func(set string, i int) []byte { return []byte(fmt.Sprintf("%s-%03d", set, i)) }
	val := func(i int) []byte { _, v := block(i); return v }

	// Native admission: R = 1 owner, plus the writer's own cache copy.
	for i := range n {
		k := key("native", i)
		if err := w.Put("default", k, [][]byte{val(i)}, store.PutOptions{Durability: policy.DurableReplicated}); err != nil {
			t.Fatalf("native put %d: %v", i, err)
		}
		want := placedOn(w, k, 1)
		if !slices.Contains(want, w.Self()) {
			want = append(want, w.Self())
			slices.Sort(want)
		}
		if got := holders(nodes, k); !slices.Equal(got, want) {
			t.Fatalf("native %s held by %v, want %v", k, got, want)
		}
	}

	// Two extra replicas with a replicated floor: on 3 owners when Put returns.
	w.st.SetAdmission(askReplicas{replicas: 2, ack: policy.DurableReplicated})
	for i := range n {
		k := key("hot", i)
		if err := w.Put("default", k, [][]byte{val(i)[:7], val(i)[7:]}, store.PutOptions{}); err != nil {
			t.Fatalf("hot put %d: %v", i, err)
		}
		dropCacheCopy(t, w, k, 3)
		if got, want := holders(nodes, k), placedOn(w, k, 3); !slices.Equal(got, want) {
			t.Fatalf("hot %s held by %v, want its 3 owners %v", k, got, want)
		}
	}
	// Two extra replicas, memory durability: the background copy places them.
	w.st.SetAdmission(askReplicas{replicas: 2})
	for i := range n {
		if err := w.Put("default", key("warm", i), [][]byte{val(i)}, store.PutOptions{}); err != nil {
			t.Fatalf("warm put %d: %v", i, err)
		}
	}
	if _, err := localmesh.WaitFor(10*time.Second, func() bool {
		for i := range n {
			h := holders(nodes, key("warm", i))
			for _, o := range placedOn(w, key("warm", i), 3) {
				if !slices.Contains(h, o) {
					return false
				}
			}
		}
		return true
	}); err != nil {
		t.Fatalf("background copies did not reach 3 owners: %v", err)
	}
	for i := range n {
		k := key("warm", i)
		dropCacheCopy(t, w, k, 3)
		if got, want := holders(nodes, k), placedOn(w, k, 3); !slices.Equal(got, want) {
			t.Fatalf("warm %s held by %v, want its 3 owners %v", k, got, want)
		}
	}
	w.st.SetAdmission(nil)
	if got := counterValue(w.metrics.extra.WithLabelValues("put", "ok")); got < 1 {
		t.Errorf("extra replicas counted on the put path: %v", got)
	}
	if got := counterValue(w.metrics.extra.WithLabelValues("background", "ok")); got < 1 {
		t.Errorf("extra replicas counted on the background path: %v", got)
	}
	// Every copy records the writer's placement, for repair.
	for _, nd := range nodes {
		for _, b := range nd.st.List() {
			if want := uint8(2 * btoi(!bytes.HasPrefix(b.Key, []byte("native")))); b.Replicas != want {
				t.Fatalf("%s's copy of %s records Replicas %d, want %d", nd.Self(), b.Key, b.Replicas, want)
			}
		}
	}
	// A re-put of a block the policy now finds hot widens its placement.
	w.st.SetAdmission(askReplicas{replicas: 2, ack: policy.DurableReplicated})
	k0 := key("native", 0)
	if err := w.Put("default", k0, [][]byte{val(0)}, store.PutOptions{}); err != nil {
		t.Fatalf("re-put: %v", err)
	}
	w.st.SetAdmission(nil)
	dropCacheCopy(t, w, k0, 3)
	if got, want := holders(nodes, k0), placedOn(w, k0, 3); !slices.Equal(got, want) {
		t.Fatalf("re-put %s held by %v, want its 3 owners %v", k0, got, want)
	}

	// Kill a primary other than the writer, one that some block it leads
	// has a non-holder reader for.
	var victim, reader *Node
	var led [][]byte // hot and warm keys victim leads that reader never held
	for _, x := range nodes[1:] {
		for _, r := range nodes[1:] {
			if r == x {
				continue
			}
			led = led[:0]
			for _, set := range []string{"hot", "warm"} {
				for i := range n {
					k := key(set, i)
					o := w.view().placed(blockID("default", k), 3)
					if o[0] == x.Self() && !slices.Contains(o, r.Self()) {
						led = append(led, k)
					}
				}
			}
			if len(led) > 0 {
				victim, reader = x, r
				break
			}
		}
		if victim != nil {
			break
		}
	}
	if victim == nil {
		t.Fatal("no key led by a non-writer with a non-holder reader")
	}
	victim.Close()
	// Before the others notice: the dead owner fails (or times out), the
	// next owner answers.
	k := led[0]
	if got, err := get(t, reader, k); err != nil || !bytes.Equal(got, val(idx(k))) {
		t.Fatalf("%s through %s just after its primary died: %v", k, reader.Self(), err)
	}
	live := slices.DeleteFunc(slices.Clone(nodes), func(nd *Node) bool { return nd == victim })
	waitSee(t, live, 3)
	for _, k := range led {
		if got, err := get(t, reader, k); err != nil || !bytes.Equal(got, val(idx(k))) {
			t.Fatalf("%s through %s after its primary died: %v", k, reader.Self(), err)
		}
	}
	if found, err := reader.Exist("default", led); err != nil || slices.Contains(found, false) {
		t.Fatalf("Exist through %s after the primary died: %v, %v", reader.Self(), found, err)
	}
	if run, err := reader.Query("default", led); err != nil || run != len(led) {
		t.Fatalf("Query through %s: %d, %v; want %d", reader.Self(), run, err, len(led))
	}
	// Repair: with 3 members left, the 3 owners of every hot and warm block
	// are all of them.
	if _, err := localmesh.WaitFor(10*time.Second, func() bool {
		for _, set := range []string{"hot", "warm"} {
			for i := range n {
				if len(holders(live, key(set, i))) != 3 {
					return false
				}
			}
		}
		return true
	}); err != nil {
		t.Fatalf("repair did not restore 3 copies of every block with extra replicas: %v", err)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// idx is the block number in a test key "set-NNN".
func idx(k []byte) int {
	var i int
	fmt.Sscanf(string(k[bytes.LastIndexByte(k, '-')+1:]), "%d", &i)
	return i
}

// A member beyond a key's R owners takes a copy only when the writer's
// placement includes it.
func TestPlaceRefusedBeyondPlacement(t *testing.T) {
	nodes := cluster(t, 3, 1)
	a := nodes[0]
	v := a.view()
	for i := range 100 {
		k, val := block(i)
		id := blockID("default", k)
		o := v.placed(id, 3)
		if o[0] == a.Self() || o[1] == a.Self() {
			continue
		}
		// o[2] is not an owner with R = 1; Replicas 1 places on 2, 2 on 3.
		if err := a.putCopy(v, o[2], false, id, 1, [][]byte{val}); err == nil {
			t.Fatalf("third owner took a copy placed on two")
		}
		if err := a.putCopy(v, o[2], false, id, 2, [][]byte{val}); err != nil {
			t.Fatalf("third owner refused a copy placed on three: %v", err)
		}
		return
	}
	t.Fatal("no key with the writer outside its first two owners")
}

// With R = 1, a member that joins becomes the only owner of some keys;
// their old owner, now second in their order, still copies them over
// (repair reaches one place beyond a block's owners).
func TestJoinTakesOverWithOneReplica(t *testing.T) {
	ca, err := tlsca.NewCA("meshtest", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	var nodes []*Node
	for i := range 2 {
		nodes = append(nodes, startNode(t, ca, fmt.Sprintf("node-%d", i), net.IPv4(127, 0, 0, byte(2+i)), 1, log, nodes))
	}
	waitSee(t, nodes, 2)
	w := nodes[0]
	const n = 40
	for i := range n {
		k, v := block(i)
		if err := w.Put("default", k, [][]byte{v}, store.PutOptions{Durability: policy.DurableReplicated}); err != nil {
			t.Fatal(err)
		}
		dropCacheCopy(t, w, k, 1)
	}
	nodes = append(nodes, startNode(t, ca, "node-2", net.IPv4(127, 0, 0, 4), 1, log, nodes))
	waitSee(t, nodes, 3)
	var moved [][]byte
	for i := range n {
		if k, _ := block(i); placedOn(w, k, 1)[0] == "node-2" {
			moved = append(moved, k)
		}
	}
	if len(moved) == 0 {
		t.Fatal("the newcomer owns none of the keys")
	}
	if _, err := localmesh.WaitFor(10*time.Second, func() bool {
		for _, k := range moved {
			if _, err := nodes[2].st.Size("default", k); err != nil {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("the newcomer did not get the %d keys it now owns: %v", len(moved), err)
	}
	for _, k := range moved {
		if _, err := get(t, w, k); err != nil {
			t.Fatalf("%s through the writer after the join: %v", k, err)
		}
	}
}
