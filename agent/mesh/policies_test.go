package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/transport/localmesh"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// goodModule is policy/testdata/good.wat compiled with wat2wasm, plus a
// custom section named variant ("" for none) so each variant has its own
// digest.
func goodModule(t *testing.T, variant string) []byte {
	t.Helper()
	tool, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Skipf("wat2wasm not found (install wabt: make deps): %v", err)
	}
	out := filepath.Join(t.TempDir(), "good.wasm")
	if msg, err := exec.Command(tool, filepath.Join("..", "..", "policy", "testdata", "good.wat"), "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if variant != "" {
		section := append(append([]byte{byte(len(variant))}, variant...), 0)
		b = append(append(b, 0, byte(len(section))), section...)
	}
	return b
}

// policyNode is a mesh node whose policy manager is shared over the mesh.
type policyNode struct {
	*Node
	mgr *policy.Manager
}

func startPolicyNode(t *testing.T, ca *tlsca.CA, name string, octet byte, seeds []*Node, limits policy.Limits) policyNode {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	nd := startNode(t, ca, name, net.IPv4(127, 0, 0, octet), 1, log, seeds)
	limits.CallTimeout = 100 * time.Millisecond
	mgr, err := policy.NewManager(context.Background(), policy.ManagerConfig{Dir: t.TempDir(), Token: "tok", Slots: nd.st, Limits: limits, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close(); mgr.Close(context.Background()) }) // the mesh first, as the agent does
	nd.SharePolicies(mgr)
	return policyNode{nd, mgr}
}

func evictionSlot(p policyNode) policy.SlotStatus {
	for _, s := range p.mgr.List().Slots {
		if s.Slot == "eviction" && s.Tier == "memory" {
			return s
		}
	}
	return policy.SlotStatus{}
}

func waitPolicies(t *testing.T, what string, nodes []policyNode, ok func(policy.SlotStatus) bool) {
	t.Helper()
	if _, err := localmesh.WaitFor(20*time.Second, func() bool {
		for _, p := range nodes {
			if !ok(evictionSlot(p)) {
				return false
			}
		}
		return true
	}); err != nil {
		var got []string
		for _, p := range nodes {
			s := evictionSlot(p)
			got = append(got, fmt.Sprintf("%s: %s v%d from %q (%s) refused %+v", p.Self(), s.Active, s.Version, s.Origin, s.State, s.Refused))
		}
		t.Fatalf("%s: %v\n%v", what, err, got)
	}
}

// refusals is how many modules p's manager has refused.
func refusals(t *testing.T, p policyNode) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.mgr.ClusterMetrics())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "refused" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// effective is the newest record a slot took: its module's, or one it
// refused.
func effective(s policy.SlotStatus) policy.Record {
	if s.Refused != nil {
		return policy.Record{Module: s.Refused.Module, Version: s.Refused.Version, Origin: s.Refused.Origin}
	}
	return policy.Record{Module: s.Active, Version: s.Version, Origin: s.Origin}
}

// A policy pushed to one member reaches every member, a member that joins
// later gets it, a member that cannot run it refuses it once and keeps its
// slot, a rollback anywhere reaches all, and concurrent pushes on two
// members end with every member on the same one.
func TestPoliciesSpreadAcrossMesh(t *testing.T) {
	ca, err := tlsca.NewCA("policytest", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []policyNode
	var meshNodes []*Node
	for i, name := range []string{"a", "b", "c"} {
		p := startPolicyNode(t, ca, name, byte(40+i), meshNodes, policy.Limits{})
		nodes, meshNodes = append(nodes, p), append(meshNodes, p.Node)
	}
	waitSee(t, meshNodes, 3)
	a, c := nodes[0], nodes[2]
	ctx := context.Background()

	digest, err := a.mgr.Push(ctx, goodModule(t, ""), policy.SlotEviction, policy.TierMemory)
	if err != nil {
		t.Fatal(err)
	}
	pushed := evictionSlot(a)
	if pushed.Version == 0 || pushed.Origin != "a" {
		t.Fatalf("pushed slot: %+v", pushed)
	}
	waitPolicies(t, "the push did not reach every member", nodes, func(s policy.SlotStatus) bool {
		return s.Active == digest && s.State == "serving" && s.Version == pushed.Version && s.Origin == "a"
	})

	// A latecomer gets it; one that allows too little memory refuses it
	// once, and stays on its native policy.
	d := startPolicyNode(t, ca, "d", 43, meshNodes, policy.Limits{})
	e := startPolicyNode(t, ca, "e", 44, meshNodes, policy.Limits{MemoryPages: 2})
	nodes, meshNodes = append(nodes, d, e), append(meshNodes, d.Node, e.Node)
	waitSee(t, meshNodes, 5)
	waitPolicies(t, "the latecomer did not get the policy", []policyNode{d}, func(s policy.SlotStatus) bool {
		return s.Active == digest && s.State == "serving" && s.Version == pushed.Version
	})
	waitPolicies(t, "e did not refuse the module", []policyNode{e}, func(s policy.SlotStatus) bool {
		return s.Active == "" && s.Refused != nil && s.Refused.Module == digest
	})
	time.Sleep(3 * time.Second) // three push/pull intervals of gossip.Local
	if n := refusals(t, e); n != 1 {
		t.Fatalf("e refused the module %v times, want once", n)
	}
	var from string
	for _, m := range d.mgr.List().Modules {
		if m.Digest == digest {
			from = m.From
		}
	}
	if from == "" || from == "d" {
		t.Fatalf("d lists the module as fetched from %q", from)
	}

	// A rollback on c reaches every member, e included.
	if back, err := c.mgr.Rollback(ctx, policy.SlotEviction, policy.TierMemory); err != nil || back != "" {
		t.Fatalf("rollback on c: %q %v", back, err)
	}
	rolled := evictionSlot(c)
	waitPolicies(t, "the rollback did not reach every member", nodes, func(s policy.SlotStatus) bool {
		return s.Active == "" && s.State == "native" && s.Version == rolled.Version && s.Origin == "c" && s.Refused == nil
	})
	if rolled.Version <= pushed.Version {
		t.Fatalf("rollback version %d not above the push's %d", rolled.Version, pushed.Version)
	}

	// Concurrent pushes of two modules on b and d: everyone ends on the
	// same record (e refuses both, but orders them the same way).
	var wg sync.WaitGroup
	for i, p := range []policyNode{nodes[1], d} {
		wg.Go(func() {
			if _, err := p.mgr.Push(ctx, goodModule(t, fmt.Sprint("v", i)), policy.SlotEviction, policy.TierMemory); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := localmesh.WaitFor(20*time.Second, func() bool {
		first := effective(evictionSlot(nodes[0]))
		for _, p := range nodes {
			s := evictionSlot(p)
			if effective(s) != first || first.Version <= rolled.Version || (p.Self() != "e" && s.State != "serving") {
				return false
			}
		}
		return true
	}); err != nil {
		for _, p := range nodes {
			t.Logf("%s: %+v", p.Self(), evictionSlot(p))
		}
		t.Fatalf("concurrent pushes did not converge: %v", err)
	}
}
