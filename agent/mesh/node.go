// Package mesh makes the agents of a cluster one cache: it runs the agent's
// QUIC endpoint and membership, places every key on R owners (weighted
// rendezvous hashing over the live members; more, the next in the same
// order, when the admission policy asks for extra replicas), serves the
// remote tier's requests, and wraps the local store so that reads fall
// back to the owners and writes reach them.
//
// Invariants: a Put acknowledged with durability replicated is held by R
// owners of the view it was placed with (this node counts when it is one);
// a member only accepts a replica of a key it owns, or of one whose
// placement the writer widened to include it (StatusNotOwner otherwise);
// reads try local tiers first, then the owners in placement order, and
// never return bytes whose checksum failed.
package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// Config is a node's place in the mesh.
type Config struct {
	Identity  *tlsca.Identity
	Transport transport.Config // Bind and Advertise set by the caller
	Gossip    gossip.Config
	Join      []string // seeds, host:port; retried until one answers
	Replicas  int      // R: owners per key
	Capacity  uint64   // bytes offered: the placement weight
	Version   string
	// PeerTimeout bounds one request to one owner; a read fails over to
	// the next owner after it.
	PeerTimeout time.Duration
	Logger      *slog.Logger
}

// Node is this agent's membership of the mesh.
type Node struct {
	cfg     Config
	st      *store.Store
	ep      *transport.Endpoint
	ms      *gossip.Membership
	log     *slog.Logger
	cur     atomic.Pointer[view]
	metrics *metrics

	repairKick chan struct{}
	pushQueue  chan queued // blocks to copy to their owners in the background
	done       chan struct{}
	closeOnce  sync.Once
	wg         sync.WaitGroup
}

// Start opens the endpoint, serves the remote tier over st, and starts
// gossiping; seeds are joined in the background until one answers.
func Start(st *store.Store, cfg Config) (*Node, error) {
	if cfg.Replicas < 1 {
		return nil, fmt.Errorf("mesh: replicas must be at least 1, got %d", cfg.Replicas)
	}
	if cfg.PeerTimeout <= 0 {
		return nil, errors.New("mesh: PeerTimeout must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Transport.Logger, cfg.Gossip.Logger = cfg.Logger, cfg.Logger
	ep, err := transport.Listen(cfg.Transport, cfg.Identity)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, st: st, ep: ep, log: cfg.Logger.With("node", ep.Name()), metrics: newMetrics(),
		repairKick: make(chan struct{}, 1), pushQueue: make(chan queued, 4096), done: make(chan struct{})}
	n.serve()
	n.ms, err = gossip.Start(ep, gossip.Meta{Capacity: cfg.Capacity, Version: cfg.Version, Blocks: st.Stat().Blocks}, cfg.Gossip)
	if err != nil {
		ep.Close()
		return nil, err
	}
	n.cur.Store(newView(n.Self(), cfg.Replicas, n.ms.Members()))
	n.wg.Add(4)
	go n.followMembership()
	go n.repairLoop()
	go n.pushLoop()
	go n.gossipBlocks()
	n.wg.Add(1)
	go n.rejoinLoop()
	if len(cfg.Join) > 0 {
		n.wg.Add(1)
		go n.join()
	}
	n.log.Info("mesh: serving", "bind", ep.Addr().String(), "advertise", ep.Advertise(), "replicas", cfg.Replicas, "join", cfg.Join)
	return n, nil
}

// Self is this node's member name (its certificate's CN).
func (n *Node) Self() string { return n.ep.Name() }

// Replicas is R.
func (n *Node) Replicas() int { return n.cfg.Replicas }

// Members lists every member seen, departed ones included.
func (n *Node) Members() []gossip.Member { return n.ms.All() }

// Advertise is the address peers reach this node at.
func (n *Node) Advertise() string { return n.ep.Advertise() }

// Collectors are the mesh's Prometheus metrics.
func (n *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.ep.Collector(), n.ms.Collector(), n.metrics}
}

func (n *Node) view() *view { return n.cur.Load() }

// join retries the seeds until one answers or the node closes.
func (n *Node) join() {
	defer n.wg.Done()
	for {
		k, err := n.ms.Join(n.cfg.Join)
		if err == nil {
			n.log.Info("mesh: joined", "seeds_answered", k, "members", len(n.ms.Members()))
			return
		}
		n.log.Warn("mesh: no seed answered; serving alone and retrying", "seeds", n.cfg.Join, "err", err)
		select {
		case <-n.done:
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// followMembership rebuilds the view on every membership event and, when
// the placed members changed, asks for a repair pass.
func (n *Node) followMembership() {
	defer n.wg.Done()
	for ev := range n.ms.Events() {
		v := newView(n.Self(), n.cfg.Replicas, n.ms.Members())
		old := n.cur.Swap(v)
		if v.samePlacement(old) {
			continue // a metadata refresh: no key moved
		}
		n.log.Info("mesh: membership", "event", ev.Kind.String(), "member", ev.Member.Name, "placed", v.names)
		select {
		case n.repairKick <- struct{}{}:
		default:
		}
	}
}

// gossipBlocks refreshes the block count in this node's metadata.
func (n *Node) gossipBlocks() {
	defer n.wg.Done()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	last := uint64(0)
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		if b := n.st.Stat().Blocks; b != last {
			last = b
			n.ms.UpdateMeta(func(m *gossip.Meta) { m.Blocks = b }, time.Second)
		}
	}
}

// Leave hands every local block to its owners in the cluster without this
// node, then says goodbye and closes. Blocks that could not be handed off
// are counted in the error.
func (n *Node) Leave(timeout time.Duration) error {
	err := n.ms.UpdateMeta(func(m *gossip.Meta) { m.Leaving = true }, timeout)
	v := newView(n.Self(), n.cfg.Replicas, n.ms.Members(), n.Self())
	start := time.Now()
	pushed, herr := n.push(v, opHandoff, true)
	n.log.Info("mesh: handed blocks off", "blocks", pushed, "took", time.Since(start).Round(time.Millisecond), "err", herr)
	err = errors.Join(err, herr, n.ms.Leave(timeout))
	n.stop()
	return err
}

// Close leaves without handing off or saying goodbye: the others will
// declare this node dead.
func (n *Node) Close() error {
	err := n.ms.Shutdown()
	n.stop()
	return err
}

func (n *Node) stop() {
	n.closeOnce.Do(func() {
		close(n.done)
		n.ms.Shutdown()
		n.ep.Close()
		n.wg.Wait()
	})
}
