// Package localmesh runs a cluster of in-process kvmesh members, each with
// its own endpoint on its own loopback address (127.0.0.2, 127.0.0.3, …, as
// hashicorp's memberlist tests do), for tests and benchmarks. Ports are
// picked by the kernel, so clusters in concurrent processes never collide.
package localmesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// Options configure every member of a Cluster.
type Options struct {
	// Transport is the endpoint configuration; Bind is set per member.
	Transport transport.Config
	Gossip    gossip.Config
}

// LocalOptions are the Local presets of both layers, logging to log.
func LocalOptions(log *slog.Logger) Options {
	t, g := transport.Local(), gossip.Local()
	t.Logger, g.Logger = log, log
	return Options{Transport: t, Gossip: g}
}

// Cluster is a set of members that share one cluster CA.
type Cluster struct {
	CA   *tlsca.CA
	opts Options

	mu      sync.Mutex
	octet   int // last octet of the previous member's address
	members []*Member
}

// Member is one in-process node.
type Member struct {
	*gossip.Membership
	Endpoint *transport.Endpoint
	stopped  bool
}

// New makes an empty cluster with a fresh CA.
func New(opts Options) (*Cluster, error) {
	ca, err := tlsca.NewCA("localmesh", time.Hour)
	if err != nil {
		return nil, err
	}
	return &Cluster{CA: ca, opts: opts, octet: 1}, nil
}

// Start brings up a member on the next loopback address, not yet joined.
func (c *Cluster) Start(name string, meta gossip.Meta) (*Member, error) {
	c.mu.Lock()
	c.octet++
	octet := c.octet
	c.mu.Unlock()
	if octet > 254 {
		return nil, errors.New("localmesh: out of 127.0.0.x addresses")
	}
	ip := net.IPv4(127, 0, 0, byte(octet))
	id, err := c.CA.Issue(name, []net.IP{ip}, time.Hour)
	if err != nil {
		return nil, err
	}
	tc := c.opts.Transport
	tc.Bind = net.JoinHostPort(ip.String(), "0")
	ep, err := transport.Listen(tc, id)
	if err != nil {
		return nil, err
	}
	ms, err := gossip.Start(ep, meta, c.opts.Gossip)
	if err != nil {
		ep.Close()
		return nil, err
	}
	m := &Member{Membership: ms, Endpoint: ep}
	c.mu.Lock()
	c.members = append(c.members, m)
	c.mu.Unlock()
	return m, nil
}

// JoinAll has every member join through seed, all at once.
func JoinAll(seed *Member, members []*Member) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() {
			if _, err := m.Join([]string{seed.Endpoint.Advertise()}); err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.Endpoint.Name(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Crash stops a member the way kill -9 would, as far as its peers can
// tell: no leave message, and its endpoint goes away.
func (m *Member) Crash() {
	if m.stopped {
		return
	}
	m.stopped = true
	m.Shutdown()
	m.Endpoint.Close()
}

// Close crashes every member still running.
func (c *Cluster) Close() {
	c.mu.Lock()
	members := c.members
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(m.Crash)
	}
	wg.Wait()
}

// Sees reports whether every observer lists exactly the members named in
// want as live.
func Sees(observers []*Member, want ...string) bool {
	for _, o := range observers {
		members := o.Members()
		if len(members) != len(want) {
			return false
		}
		names := make(map[string]bool, len(members))
		for _, m := range members {
			names[m.Name] = true
		}
		for _, w := range want {
			if !names[w] {
				return false
			}
		}
	}
	return true
}

// Names lists the members' node names.
func Names(members []*Member) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.Endpoint.Name()
	}
	return out
}

// WaitFor polls cond every 5 ms until it holds, returning how long
// that took, or an error after timeout.
func WaitFor(timeout time.Duration, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("localmesh: condition not met within %v", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), nil
}
