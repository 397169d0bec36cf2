package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// kvmeshRun runs a kvmesh CLI command and fails the test if it fails.
func kvmeshRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(kvmeshBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("kvmesh %v: %v\n%s", args, err, out)
	}
}

// nodeCert makes a node directory for name from the CA in caDir.
func nodeCert(t *testing.T, caDir, name string) string {
	dir := filepath.Join(t.TempDir(), name)
	kvmeshRun(t, "tls", "cert", "create", "--ca", caDir, "--node", name, "--out", dir)
	return dir
}

// udpAddr is host with a port free at the time of the call.
func udpAddr(t *testing.T, host string) string {
	t.Helper()
	c, err := net.ListenPacket("udp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// startMeshAgent runs a cluster-mode agent on host with the node
// directory tlsDir, joining seed ("" for none).
func startMeshAgent(t *testing.T, host, tlsDir, seed string, replicas int, extra ...string) (*agentProc, string) {
	addr := udpAddr(t, host)
	args := append([]string{"--mem-capacity", "64MiB", "--disk-capacity", "0", "--tls-dir", tlsDir,
		"--bind", addr, "--replicas", fmt.Sprint(replicas)}, extra...)
	if seed != "" {
		args = append(args, "--join", seed)
	}
	return startAgent(t, t.TempDir(), args...), addr
}

// waitMembers polls p's Members until want holds, within 15 s.
func waitMembers(t *testing.T, p *agentProc, what string, want func(map[string]string) bool) {
	t.Helper()
	c := p.client()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ms, err := c.Members(ctx)
		cancel()
		states := map[string]string{}
		if err == nil {
			for _, m := range ms.Members {
				states[m.Name] = m.State
			}
			if want(states) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: members never reached %s; last %v (%v)\n%s", p.socket, what, states, err, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func alive(names ...string) func(map[string]string) bool {
	return func(states map[string]string) bool {
		n := 0
		for _, s := range states {
			if s == "alive" {
				n++
			}
		}
		for _, name := range names {
			if states[name] != "alive" {
				return false
			}
		}
		return n == len(names)
	}
}

// Three agents on 127.0.0.1/2/3 with R = 2: a block written through A is
// read byte-exact through C; kill -9 of an agent loses no block
// acknowledged as replicated; an agent whose certificate comes from
// another CA can neither join nor read.
func TestClusterReplicatedAcrossProcesses(t *testing.T) {
	t.Parallel()
	caDir := filepath.Join(t.TempDir(), "ca")
	kvmeshRun(t, "tls", "ca", "create", "--out", caDir)
	a, seed := startMeshAgent(t, "127.0.0.1", nodeCert(t, caDir, "a"), "", 2)
	b, _ := startMeshAgent(t, "127.0.0.2", nodeCert(t, caDir, "b"), seed, 2)
	c, _ := startMeshAgent(t, "127.0.0.3", nodeCert(t, caDir, "c"), seed, 2)
	for _, p := range []*agentProc{a, b, c} {
		waitMembers(t, p, "a, b, c alive", alive("a", "b", "c"))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 40
	blocks := make([][]byte, n)
	ca, cc := a.client(), c.client()
	start := time.Now()
	for i := range blocks {
		blocks[i] = bytes.Repeat([]byte(fmt.Sprintf("block %d|", i)), 50000+i)
		if err := ca.Put(ctx, "", []byte(fmt.Sprint("k", i)), blocks[i], kvmeshv1.Durability_DURABILITY_REPLICATED); err != nil {
			t.Fatalf("replicated put %d: %v", i, err)
		}
	}
	t.Logf("replicated put of ~450 KiB: %v each", time.Since(start)/n)
	readAll := func(p *agentProc, cl *client.Client) {
		t.Helper()
		for i, want := range blocks {
			got, err := cl.Get(ctx, "", []byte(fmt.Sprint("k", i)))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("get k%d through %s: %v (equal %v)", i, p.socket, err, bytes.Equal(got, want))
			}
		}
	}
	readAll(c, cc)
	keys := [][]byte{[]byte("k0"), []byte("k1"), []byte("k2"), []byte("absent"), []byte("k3")}
	if run, err := cc.Query(ctx, "", keys); err != nil || run != 3 {
		t.Fatalf("Query through c = %d, %v; want 3", run, err)
	}

	b.kill()
	waitMembers(t, a, "b dead", alive("a", "c"))
	waitMembers(t, c, "b dead", alive("a", "c"))
	readAll(a, ca)
	readAll(c, cc)

	// Another cluster's CA: refused at the handshake, so D stays alone
	// and finds nothing.
	otherCA := filepath.Join(t.TempDir(), "other-ca")
	kvmeshRun(t, "tls", "ca", "create", "--out", otherCA)
	admin := freeTCP(t)
	d, _ := startMeshAgent(t, "127.0.0.4", nodeCert(t, otherCA, "d"), seed, 2, "--admin-addr", admin)
	deadline := time.Now().Add(15 * time.Second)
	for refusedCerts(t, admin) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("d never refused the cluster's certificates")
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitMembers(t, d, "d alone", alive("d"))
	waitMembers(t, a, "a, c only", alive("a", "c"))
	var ke *client.KeyError
	if _, err := d.client().Get(ctx, "", []byte("k0")); !errors.As(err, &ke) || ke.Code != client.NotFound {
		t.Fatalf("foreign agent read k0: %v", err)
	}
}

// freeTCP is a loopback TCP address free at the time of the call.
func freeTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// refusedCerts is how many peer certificates the agent with admin address
// admin has refused, on either side of a handshake, from its /metrics.
func refusedCerts(t *testing.T, admin string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var n float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `kvmesh_transport_refused_total{reason="certificate",`) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += v
		}
	}
	return n
}
