package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/localmesh"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// cluster starts n nodes with replication r on 127.0.0.2, .3, …, each
// with its own memory-only store, all joined through the first, and waits
// until every one sees all.
func cluster(t *testing.T, n, r int) []*Node {
	t.Helper()
	ca, err := tlsca.NewCA("meshtest", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	var nodes []*Node
	for i := range n {
		nodes = append(nodes, startNode(t, ca, fmt.Sprintf("node-%d", i), net.IPv4(127, 0, 0, byte(2+i)), r, log, nodes))
	}
	waitSee(t, nodes, n)
	return nodes
}

func startNode(t *testing.T, ca *tlsca.CA, name string, ip net.IP, r int, log *slog.Logger, seeds []*Node) *Node {
	t.Helper()
	id, err := ca.Issue(name, []net.IP{ip}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(store.Config{MemCapacity: 64 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tc := transport.Local()
	tc.Bind = net.JoinHostPort(ip.String(), "0")
	var join []string
	if len(seeds) > 0 {
		join = []string{seeds[0].Advertise()}
	}
	nd, err := Start(st, Config{Identity: id, Transport: tc, Gossip: gossip.Local(), Join: join, Replicas: r,
		Capacity: 1 << 30, PeerTimeout: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close(); st.Close() })
	return nd
}

// waitSee waits until every node's view places keys over want members.
func waitSee(t *testing.T, nodes []*Node, want int) {
	t.Helper()
	if _, err := localmesh.WaitFor(10*time.Second, func() bool {
		for _, nd := range nodes {
			if nd.view().table.Len() != want {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("members did not converge on %d: %v", want, err)
	}
}

func block(i int) ([]byte, []byte) {
	return []byte(fmt.Sprintf("blk-%03d", i)), bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xA5}, 40000+i)
}

func get(t *testing.T, nd *Node, key []byte) ([]byte, error) {
	t.Helper()
	size, err := nd.Size("default", key)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	_, err = nd.Get("default", key, [][]byte{buf[:size/2], buf[size/2:]})
	return buf, err
}

func TestReplicatedPutReadAnywhereSurvivesCrash(t *testing.T) {
	nodes := cluster(t, 3, 2)
	a, b, c := nodes[0], nodes[1], nodes[2]
	const n = 30
	var ks [][]byte
	for i := range n {
		k, v := block(i)
		ks = append(ks, k)
		if err := a.Put("default", k, [][]byte{v[:100], v[100:]}, store.PutOptions{Durability: policy.DurableReplicated}); err != nil {
			t.Fatalf("replicated put %d: %v", i, err)
		}
		// Acknowledged: R owners hold it now, not eventually.
		held := 0
		for _, nd := range nodes {
			if _, err := nd.st.Size("default", k); err == nil && nd.view().owns(blockID("default", k)) {
				held++
			}
		}
		if held < 2 {
			t.Fatalf("put %d acknowledged with %d owners holding it", i, held)
		}
	}
	for i, k := range ks {
		_, want := block(i)
		got, err := get(t, c, k)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s through c: err %v, equal %v", k, err, bytes.Equal(got, want))
		}
	}
	missing := append(append([][]byte{}, ks[:5]...), []byte("absent"), ks[5])
	if run, err := c.Query("default", missing); err != nil || run != 5 {
		t.Fatalf("Query = %d, %v; want the 5 leading keys", run, err)
	}
	if found, err := b.Exist("default", missing); err != nil || found[5] || !found[6] {
		t.Fatalf("Exist = %v, %v", found, err)
	}

	b.Close() // a crash: no goodbye, no hand-off
	waitSee(t, []*Node{a, c}, 2)
	for i, k := range ks {
		_, want := block(i)
		for _, nd := range []*Node{a, c} {
			got, err := get(t, nd, k)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("after crash, %s through %s: err %v", k, nd.Self(), err)
			}
		}
	}
	// With two members left and R = 2, repair gives both a copy of all.
	if _, err := localmesh.WaitFor(10*time.Second, func() bool {
		return int(a.st.Stat().Blocks) == n && int(c.st.Stat().Blocks) == n
	}); err != nil {
		t.Fatalf("re-replication: a holds %d, c %d of %d", a.st.Stat().Blocks, c.st.Stat().Blocks, n)
	}
}

func TestReplicatedPutNeedsROwners(t *testing.T) {
	nodes := cluster(t, 2, 3)
	k, v := block(1)
	err := nodes[0].Put("default", k, [][]byte{v}, store.PutOptions{Durability: policy.DurableReplicated})
	if store.CodeOf(err) != store.CodeUnavailable {
		t.Fatalf("R=3 with 2 members: %v, want UNAVAILABLE", err)
	}
}

func TestLeaveHandsBlocksOff(t *testing.T) {
	nodes := cluster(t, 3, 1)
	a, b, c := nodes[0], nodes[1], nodes[2]
	const n = 30
	for i := range n {
		k, v := block(i)
		// Into b's store directly: b alone holds them.
		if err := b.st.Put("default", k, [][]byte{v}, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Leave(10 * time.Second); err != nil { // generous: CI runs packages side by side on 2 cores
		t.Fatalf("leave: %v", err)
	}
	waitSee(t, []*Node{a, c}, 2)
	for i := range n {
		k, want := block(i)
		got, err := get(t, a, k)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after b left, %s through a: %v", k, err)
		}
	}
}

func TestPutRefusedByNonOwner(t *testing.T) {
	nodes := cluster(t, 3, 1)
	a := nodes[0]
	v := a.view()
	for i := range 100 {
		k, val := block(i)
		id := blockID("default", k)
		owner := v.owners(id)[0]
		for _, nd := range nodes[1:] {
			if nd.Self() == owner {
				continue
			}
			err := a.remotePut(v, nd.Self(), opPut, id, [][]byte{val})
			if !errors.Is(err, frame.ErrNotOwner) {
				t.Fatalf("non-owner %s took %s: %v", nd.Self(), k, err)
			}
			if _, err := nd.st.Size("default", k); !store.IsNotFound(err) {
				t.Fatalf("non-owner stored the refused block: %v", err)
			}
			return
		}
	}
	t.Fatal("no key with a non-owner among the peers")
}
