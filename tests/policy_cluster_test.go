package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/internal/testenv"
	"github.com/kvmesh/kvmesh/policy"
)

// policyAgent is a cluster-mode agent with an admin API that takes policy
// changes.
type policyAgent struct {
	*agentProc
	name, admin string
}

const policyToken = "cluster-policy-test"

func startPolicyAgent(t *testing.T, caDir, host, name, seed string) (policyAgent, string) {
	t.Helper()
	admin := freeTCP(t)
	p, addr := startMeshAgent(t, host, nodeCert(t, caDir, name), seed, 1, "--admin-addr", admin, "--admin-token", policyToken)
	return policyAgent{p, name, admin}, addr
}

// policyCLI runs `kvmesh policy ARGS` against the agent.
func (p policyAgent) policyCLI(t *testing.T, args ...string) []byte {
	t.Helper()
	args = append(append([]string{"policy"}, args...), "--admin-addr", p.admin, "--admin-token", policyToken)
	out, err := exec.Command(kvmeshBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kvmesh %v: %v\n%s", args, err, out)
	}
	return out
}

// evictionSlot is the memory tier's eviction slot as `kvmesh policy ls
// --json` lists it.
func (p policyAgent) evictionSlot(t *testing.T) policy.SlotStatus {
	t.Helper()
	var l policy.Listing
	if err := json.Unmarshal(p.policyCLI(t, "ls", "--json"), &l); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Slots {
		if s.Slot == "eviction" && s.Tier == "memory" {
			return s
		}
	}
	t.Fatalf("%s lists no eviction/memory slot: %+v", p.name, l)
	return policy.SlotStatus{}
}

// waitSlot polls the agents' listings until ok holds for each.
func waitSlot(t *testing.T, what string, agents []policyAgent, ok func(policy.SlotStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // each agent compiles and dry-runs the module; CI shares 2 cores
	for _, p := range agents {
		for {
			s := p.evictionSlot(t)
			if ok(s) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s lists %+v\n%s", what, p.name, s, p.log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// A policy pushed to agent A becomes active on B and C; D, started later,
// gets it when it joins; a rollback on C reaches A (and the rest).
func TestPolicyReachesEveryAgent(t *testing.T) {
	t.Parallel()
	module := testenv.PolicyPath(t, "lru")
	wasm, err := os.ReadFile(module)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	digest := hex.EncodeToString(sum[:])

	caDir := filepath.Join(t.TempDir(), "ca")
	kvmeshRun(t, "tls", "ca", "create", "--out", caDir)
	a, seed := startPolicyAgent(t, caDir, "127.0.0.21", "a", "")
	b, _ := startPolicyAgent(t, caDir, "127.0.0.22", "b", seed)
	c, _ := startPolicyAgent(t, caDir, "127.0.0.23", "c", seed)
	for _, p := range []policyAgent{a, b, c} {
		waitMembers(t, p.agentProc, "a, b, c alive", alive("a", "b", "c"))
	}

	a.policyCLI(t, "push", module, "--slot", "eviction")
	pushed := a.evictionSlot(t)
	if pushed.Active != digest || pushed.Version == 0 || pushed.Origin != "a" {
		t.Fatalf("a after the push: %+v", pushed)
	}
	start := time.Now()
	waitSlot(t, "the push did not reach b and c", []policyAgent{b, c}, func(s policy.SlotStatus) bool {
		return s.Active == digest && s.State == "serving" && s.Version == pushed.Version && s.Origin == "a"
	})
	t.Logf("push reached b and c in %v", time.Since(start).Round(time.Millisecond))

	d, _ := startPolicyAgent(t, caDir, "127.0.0.24", "d", seed)
	waitMembers(t, d.agentProc, "a, b, c, d alive", alive("a", "b", "c", "d"))
	waitSlot(t, "d did not get the active policy when it joined", []policyAgent{d}, func(s policy.SlotStatus) bool {
		return s.Active == digest && s.State == "serving" && s.Version == pushed.Version && s.Origin == "a"
	})

	c.policyCLI(t, "rollback", "--slot", "eviction")
	rolled := c.evictionSlot(t)
	if rolled.Active != "" || rolled.Version <= pushed.Version || rolled.Origin != "c" {
		t.Fatalf("c after the rollback: %+v", rolled)
	}
	waitSlot(t, "the rollback on c did not reach the others", []policyAgent{a, b, d}, func(s policy.SlotStatus) bool {
		return s.Active == "" && s.State == "native" && s.Version == rolled.Version && s.Origin == "c"
	})
}
