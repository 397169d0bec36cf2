package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
	"github.com/kvmesh/kvmesh/transport/placement"
)

// netLab is a private network for agents: a hub namespace holding a
// bridge, and one namespace per node whose eth0 is a veth pair with a port
// on that bridge. The hub is a fresh namespace, so the host's firewall
// (br_netfilter, Docker's FORWARD policy) never sees the traffic, and
// names are unique per run, so labs of concurrent runs never meet.
type netLab struct {
	t      *testing.T
	prefix string
	hub    string
}

// ip runs iproute2 and returns its output with any failure.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// newNetLab makes the hub, or skips the test where network namespaces
// cannot be made (not root, no iproute2, a sandbox without CAP_SYS_ADMIN).
func newNetLab(t *testing.T) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns and veth (CI runs make test as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip (make deps installs it)")
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	l := &netLab{t: t, prefix: fmt.Sprintf("kvp%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))}
	l.hub = l.prefix + "-hub"
	if err := ip("netns", "add", l.hub); err != nil {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() { ip("netns", "del", l.hub) })
	l.must("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.must("-n", l.hub, "link", "set", "br0", "up")
	return l
}

func (l *netLab) must(args ...string) {
	l.t.Helper()
	if err := ip(args...); err != nil {
		l.t.Fatal(err)
	}
}

// addNode makes the namespace of node name with address cidr on its eth0,
// plugged into the hub's bridge as port p<name>, and returns the command
// that runs a program inside it.
func (l *netLab) addNode(name, cidr string) []string {
	l.t.Helper()
	ns := l.prefix + "-" + name
	l.must("netns", "add", ns)
	l.t.Cleanup(func() { ip("netns", "del", ns) })
	l.must("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "p"+name, "netns", l.hub)
	l.must("-n", l.hub, "link", "set", "p"+name, "master", "br0", "up")
	l.must("-n", ns, "addr", "add", cidr, "dev", "eth0")
	l.must("-n", ns, "link", "set", "eth0", "up")
	l.must("-n", ns, "link", "set", "lo", "up")
	return []string{"ip", "netns", "exec", ns}
}

// cut takes node name's port off the bridge: every frame to or from it is
// dropped in silence, with no link-down for either side to notice, as
// when a switch fails between racks.
func (l *netLab) cut(name string) {
	l.t.Helper()
	l.must("-n", l.hub, "link", "set", "p"+name, "nomaster")
}

// heal plugs node name's port back into the bridge.
func (l *netLab) heal(name string) {
	l.t.Helper()
	l.must("-n", l.hub, "link", "set", "p"+name, "master", "br0")
}

// states is a waitMembers condition: exactly these members, in these
// states.
func states(want map[string]string) func(map[string]string) bool {
	return func(got map[string]string) bool {
		if len(got) != len(want) {
			return false
		}
		for name, s := range want {
			if got[name] != s {
				return false
			}
		}
		return true
	}
}

// unavailable is UNAVAILABLE's code (docs/errors.md).
const unavailable = -10

// Three agents, each in its own network namespace on a private bridge,
// R = 2. C is cut off from A and B and later plugged back in. Asserts:
// every replicated Put through C fails with UNAVAILABLE while it is cut
// off (it can never reach R owners), whether or not it has noticed yet,
// while it keeps serving the blocks it owns from its own store; both
// sides' membership shows the other side dead, and all three alive
// again after the heal; A and B serve every block acknowledged before the
// cut, re-replicate among themselves and acknowledge new replicated Puts;
// after the heal every acknowledged block is read byte-exact through every
// agent and is held by both of its owners (repair).
func TestPartitionHealsWithoutLosingAckedBlocks(t *testing.T) {
	lab := newNetLab(t)
	begin := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.2fs "+format, append([]any{time.Since(begin).Seconds()}, args...)...)
	}
	caDir := t.TempDir() + "/ca"
	kvmeshRun(t, "tls", "ca", "create", "--out", caDir)

	names := []string{"a", "b", "c"}
	agents := map[string]*agentProc{}
	clients := map[string]*client.Client{}
	var seed string
	for i, name := range names {
		wrap := lab.addNode(name, fmt.Sprintf("10.213.0.%d/24", i+1))
		addr := fmt.Sprintf("10.213.0.%d:7946", i+1)
		args := []string{"--mem-capacity", "64MiB", "--disk-capacity", "0", "--tls-dir", nodeCert(t, caDir, name),
			"--bind", addr, "--replicas", "2", "--gossip-profile", "local"}
		if seed == "" {
			seed = addr
		} else {
			args = append(args, "--join", seed)
		}
		agents[name] = startAgentUnder(t, wrap, t.TempDir(), args...)
		clients[name] = agents[name].client()
	}
	for _, name := range names {
		waitMembers(t, agents[name], "a, b, c alive", alive(names...))
	}
	step("three agents alive in their namespaces")

	// Placement as the agents compute it: equal capacities, placement
	// key uvarint(len ns) ‖ ns ‖ key with ns the block's namespace (""
	// is "default").
	table := placement.New([]placement.Member{{Name: "a", Weight: 64 << 20}, {Name: "b", Weight: 64 << 20}, {Name: "c", Weight: 64 << 20}})
	owners := func(key string) []string {
		id := binary.AppendUvarint(nil, uint64(len("default")))
		return table.Owners(append(append(id, "default"...), key...), 2)
	}

	var mu sync.Mutex
	acked := map[string][]byte{} // acknowledged as replicated: must survive
	value := func(key string) []byte { return bytes.Repeat([]byte(key+"|"), 64<<10/(len(key)+1)) }
	put := func(via, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		v := value(key)
		err := clients[via].Put(ctx, "", []byte(key), v, kvmeshv1.Durability_DURABILITY_REPLICATED)
		if err == nil {
			mu.Lock()
			acked[key] = v
			mu.Unlock()
		}
		return err
	}
	// mustAck retries a replicated Put whose owners are all reachable
	// until it is acknowledged: a false suspicion on a loaded machine
	// may fail one attempt, never all of them for seconds.
	mustAck := func(via, key string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := put(via, key)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicated put of %s through %s (owners %v reachable): %v", key, via, owners(key), err)
			}
			t.Logf("replicated put of %s through %s failed, retrying: %v", key, via, err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	mustFail := func(via, key string) {
		t.Helper()
		start := time.Now()
		err := put(via, key)
		var ke *client.KeyError
		if !errors.As(err, &ke) || ke.Code != unavailable {
			t.Errorf("replicated put of %s through %s, cut off from its owners %v: %v; want UNAVAILABLE", key, via, owners(key), err)
			return
		}
		t.Logf("replicated put of %s through %s refused in %v: %v", key, via, time.Since(start).Round(time.Millisecond), ke.Msg)
	}
	// readAll reads every acknowledged block through via, retrying
	// failures until the deadline; wrong bytes fail at once.
	readAll := func(via string, within time.Duration) {
		t.Helper()
		mu.Lock()
		keys := make([]string, 0, len(acked))
		for k := range acked {
			keys = append(keys, k)
		}
		mu.Unlock()
		sort.Strings(keys)
		deadline := time.Now().Add(within)
		for _, k := range keys {
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				got, err := clients[via].Get(ctx, "", []byte(k))
				cancel()
				if err == nil && !bytes.Equal(got, acked[k]) {
					t.Fatalf("get %s through %s: %d wrong bytes (want %d)", k, via, len(got), len(acked[k]))
				}
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("get %s (owners %v) through %s: %v\n%s", k, owners(k), via, err, agents[via].log)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	// waitHeld waits up to within until every acknowledged block that
	// holders should hold (by owner) is in that node's own store: Pin
	// only succeeds on a local copy, so no other member can answer for
	// it. With within 0 it checks once.
	waitHeld := func(what string, within time.Duration, holders []string, owner func(key, node string) bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			var missing []string
			mu.Lock()
			for _, node := range holders {
				var ks [][]byte
				for k := range acked {
					if owner(k, node) {
						ks = append(ks, []byte(k))
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				errs, err := clients[node].Pin(ctx, "", ks)
				cancel()
				if err != nil {
					missing = append(missing, fmt.Sprintf("%s: %v", node, err))
					continue
				}
				var pinned [][]byte
				for i, e := range errs {
					if e != nil {
						missing = append(missing, fmt.Sprintf("%s on %s (owners %v)", ks[i], node, owners(string(ks[i]))))
					} else {
						pinned = append(pinned, ks[i])
					}
				}
				ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
				clients[node].Unpin(ctx, "", pinned)
				cancel()
			}
			mu.Unlock()
			if len(missing) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d copies missing after %v: %v", what, len(missing), within, missing)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Before the cut: replicated Puts through every agent.
	for i := range 24 {
		mustAck(names[i%3], fmt.Sprint("before-", i))
	}
	// Acknowledged means on both owners already, so no repair should be
	// needed; the grace only covers a false suspicion on a loaded machine
	// (the view flaps and repair puts the copies back).
	waitHeld("before the cut, held by both owners", 2*time.Second, names, func(k, node string) bool { return slices.Contains(owners(k), node) })
	step("%d blocks acknowledged as replicated", len(acked))

	lab.cut("c")
	step("c cut off")
	// Straight after the cut, before anyone notices: C can never reach R
	// owners, so each of its replicated Puts must fail. A's may fail or
	// succeed (if A already placed without C); only successes count.
	var wg sync.WaitGroup
	var early []string
	for i := range 3 {
		wg.Go(func() { mustFail("c", fmt.Sprint("minority-early-", i)) })
		wg.Go(func() {
			key := fmt.Sprint("majority-early-", i)
			if err := put("a", key); err != nil {
				mu.Lock()
				early = append(early, fmt.Sprintf("%s (owners %v): %v", key, owners(key), err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	step("early puts done; refused on the majority side: %v", early)

	waitMembers(t, agents["a"], "c dead", states(map[string]string{"a": "alive", "b": "alive", "c": "dead"}))
	waitMembers(t, agents["b"], "c dead", states(map[string]string{"a": "alive", "b": "alive", "c": "dead"}))
	waitMembers(t, agents["c"], "a and b dead", states(map[string]string{"a": "dead", "b": "dead", "c": "alive"}))
	detected := time.Now()
	step("both sides see the other dead")

	// The majority serves everything acknowledged, re-replicates among
	// itself (A and B now own every key) and acknowledges new Puts.
	readAll("a", 5*time.Second)
	readAll("b", 5*time.Second)
	for i := range 16 {
		mustAck(names[i%2], fmt.Sprint("majority-", i))
	}
	waitHeld("majority side re-replicated", 10*time.Second, []string{"a", "b"}, func(string, string) bool { return true })
	// The minority refuses at once: one live member cannot be R owners.
	for i := range 4 {
		mustFail("c", fmt.Sprint("minority-", i))
	}
	// It still serves, from its own store, the blocks it owns.
	for i := range 24 {
		key := fmt.Sprint("before-", i)
		if !slices.Contains(owners(key), "c") {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := clients["c"].Get(ctx, "", []byte(key))
		cancel()
		if err != nil || !bytes.Equal(got, acked[key]) {
			t.Fatalf("get %s through c, cut off: %v (equal %v)", key, err, bytes.Equal(got, acked[key]))
		}
	}
	step("partitioned: majority acknowledged and re-replicated, minority refused and served its own")

	// Hold the partition well past GossipToTheDeadTime (2 s under the
	// local profile): memberlist has stopped gossiping to the dead by
	// then, so only the agents' own rejoining can heal the split.
	time.Sleep(time.Until(detected.Add(4 * time.Second)))
	lab.heal("c")
	healed := time.Now()
	for _, name := range names {
		waitMembers(t, agents[name], "a, b, c alive after the heal", alive(names...))
	}
	step("healed: all alive again after %v", time.Since(healed).Round(time.Millisecond))

	for _, name := range names {
		readAll(name, 10*time.Second)
	}
	step("all %d acknowledged blocks read byte-exact through a, b and c", len(acked))
	waitHeld("after the heal, held by both owners", 10*time.Second, names, func(k, node string) bool { return slices.Contains(owners(k), node) })
	step("repaired: every acknowledged block held by both its owners")
}
