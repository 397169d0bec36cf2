package gossip_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/localmesh"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// syncBuf is a log sink tests can read while members write.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newCluster(t *testing.T) (*localmesh.Cluster, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	c, err := localmesh.New(localmesh.LocalOptions(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, logs
}

func start(t *testing.T, c *localmesh.Cluster, n int, prefix string) []*localmesh.Member {
	t.Helper()
	members := make([]*localmesh.Member, n)
	for i := range members {
		m, err := c.Start(fmt.Sprintf("%s%02d", prefix, i), gossip.Meta{Capacity: uint64(i+1) << 30, Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		members[i] = m
	}
	return members
}

func wait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if _, err := localmesh.WaitFor(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Eight members joining through one seed all see each other, with the
// metadata each announced, well within a second.
func TestJoinConverges(t *testing.T) {
	c, _ := newCluster(t)
	members := start(t, c, 8, "n")
	if err := localmesh.JoinAll(members[0], members[1:]); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "members did not converge", func() bool {
		return localmesh.Sees(members, localmesh.Names(members)...)
	})
	for _, m := range members[5].Members() {
		if m.State != gossip.StateAlive || m.Meta.Addr != m.Addr || m.Meta.Version != "test" || m.Meta.Capacity == 0 {
			t.Fatalf("member %+v: want alive, Meta.Addr = gossip address, version and capacity set", m)
		}
	}
	if got := members[3].Local(); got.Name != "n03" || got.Meta.Capacity != 4<<30 {
		t.Fatalf("Local() = %+v", got)
	}
}

// collect gathers a member's events in the background.
type collector struct {
	mu     sync.Mutex
	events []gossip.Event
}

func collect(m *localmesh.Member) *collector {
	c := &collector{}
	go func() {
		for e := range m.Events() {
			c.mu.Lock()
			c.events = append(c.events, e)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) all() []gossip.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]gossip.Event(nil), c.events...)
}

func (c *collector) has(kind gossip.EventKind, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e.Kind == kind && e.Member.Name == name {
			return true
		}
	}
	return false
}

func TestCrashedMemberDeclaredDead(t *testing.T) {
	c, _ := newCluster(t)
	members := start(t, c, 6, "n")
	watch := collect(members[1])
	if err := localmesh.JoinAll(members[0], members[1:]); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "members did not converge", func() bool {
		return localmesh.Sees(members, localmesh.Names(members)...)
	})
	members[4].Crash()
	survivors := append(members[:4:4], members[5])
	wait(t, 10*time.Second, "survivors still list the crashed member", func() bool {
		return localmesh.Sees(survivors, localmesh.Names(survivors)...)
	})
	wait(t, time.Second, "no fail event for the crashed member", func() bool {
		return watch.has(gossip.EventJoin, "n04") && watch.has(gossip.EventFail, "n04")
	})
}

func TestLeaveAndMetaUpdate(t *testing.T) {
	c, _ := newCluster(t)
	members := start(t, c, 4, "n")
	watch := collect(members[0])
	if err := localmesh.JoinAll(members[0], members[1:]); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "members did not converge", func() bool {
		return localmesh.Sees(members, localmesh.Names(members)...)
	})

	if err := members[2].UpdateMeta(func(m *gossip.Meta) { m.Blocks = 42 }, time.Second); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "metadata update did not spread", func() bool {
		for _, m := range members[3].Members() {
			if m.Name == "n02" {
				return m.Meta.Blocks == 42
			}
		}
		return false
	})

	if err := members[3].Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "leave did not spread", func() bool {
		return localmesh.Sees(members[:3], localmesh.Names(members[:3])...)
	})
	wait(t, time.Second, fmt.Sprintf("no update and leave events in %v", watch.all()), func() bool {
		return watch.has(gossip.EventUpdate, "n02") && watch.has(gossip.EventLeave, "n03") && !watch.has(gossip.EventFail, "n03")
	})
}

// A node whose certificate comes from another CA can neither join nor be
// listed; its attempts are refused at the TLS handshake, and logged.
func TestNodeOfAnotherClusterCannotGossip(t *testing.T) {
	c, _ := newCluster(t)
	members := start(t, c, 3, "n")
	if err := localmesh.JoinAll(members[0], members[1:]); err != nil {
		t.Fatal(err)
	}

	other, strangerLogs := newCluster(t)
	stranger := start(t, other, 1, "stranger")[0]
	if n, err := stranger.Join([]string{members[0].Endpoint.Advertise()}); err == nil || n != 0 {
		t.Fatalf("a node of another cluster joined (%d contacted)", n)
	}
	// Nor can the stranger slip in by packets alone: pings to every member.
	for _, m := range members {
		stranger.Endpoint.SendPacket(m.Endpoint.Advertise(), []byte("not even memberlist"))
	}
	wait(t, 5*time.Second, "members did not converge", func() bool {
		return localmesh.Sees(members, localmesh.Names(members)...)
	})
	if strings.Contains(fmt.Sprint(members[0].Members()), "stranger") {
		t.Fatal("a node of another cluster is listed")
	}
	wait(t, 5*time.Second, "no refusal logged", func() bool {
		return strings.Contains(strangerLogs.String(), "reason=certificate")
	})
}

// A plain memberlist node (UDP and TCP, no TLS) gets nowhere either.
func TestPlainMemberlistCannotJoin(t *testing.T) {
	c, _ := newCluster(t)
	member := start(t, c, 1, "n")[0]
	conf := memberlist.DefaultLocalConfig()
	conf.Name = "plain"
	conf.BindAddr = "127.0.0.250"
	conf.BindPort = 0
	conf.LogOutput = io.Discard
	plain, err := memberlist.Create(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Shutdown()
	if _, err := plain.Join([]string{member.Endpoint.Advertise()}); err == nil {
		t.Fatal("a memberlist node without TLS joined")
	}
	if len(member.Members()) != 1 {
		t.Fatalf("member lists %v", member.Members())
	}
}

// Start refuses a configuration that would converge slowly.
func TestConfigRejectsLowRetransmitMult(t *testing.T) {
	ca, err := tlsca.NewCA("c", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.Issue("n", []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := transport.Listen(transport.Local(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	cfg := gossip.Local()
	cfg.RetransmitMult = 2
	if _, err := gossip.Start(ep, gossip.Meta{}, cfg); err == nil {
		t.Fatal("Start accepted RetransmitMult 2")
	}
}
