// Package gossip is cluster membership for kvmesh agents: hashicorp's
// memberlist (SWIM gossip, no master) running over the agent's QUIC
// endpoint, so membership shares the data port and is authenticated by the
// same mutual TLS. Each member's name is the common name of its node
// certificate, and it carries Meta: its data address, capacity and version.
package gossip

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/transport"
)

// Meta is what a member tells the others about itself. It travels in every
// alive message, so it stays small (memberlist allows 512 bytes).
type Meta struct {
	// Addr is where the member serves requests (host:port); today the
	// endpoint that also gossips.
	Addr string `json:"addr"`
	// Capacity is the bytes of cache it offers; placement weighs members
	// by it.
	Capacity uint64 `json:"cap"`
	// Version is the agent's software version.
	Version string `json:"ver,omitempty"`
	// Blocks is how many blocks it holds, refreshed now and then.
	Blocks uint64 `json:"blocks,omitempty"`
	// Leaving is set by Leave just before the member says goodbye, so
	// the others can tell its departure from a crash: memberlist reports
	// both the same way.
	Leaving bool `json:"leaving,omitempty"`
}

// State is a member's liveness as the local member sees it. A suspected
// member counts as alive until declared dead: memberlist does not expose
// suspicion, and most suspicions are refuted anyway.
type State uint8

const (
	StateAlive State = iota
	StateDead
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "unknown"
}

// Member is one node of the cluster.
type Member struct {
	Name string
	// Addr is its gossip address (host:port).
	Addr  string
	State State
	Meta  Meta
}

// EventKind says what happened to a member.
type EventKind uint8

const (
	EventJoin   EventKind = iota + 1 // it is new, or back after dying
	EventUpdate                      // its Meta changed
	EventLeave                       // it left gracefully
	EventFail                        // it was declared dead
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	}
	return "unknown"
}

// Event is a change of membership.
type Event struct {
	Kind   EventKind
	Member Member
}

// Membership is this node's view of the cluster. It is safe for concurrent
// use.
type Membership struct {
	ml      *memberlist.Memberlist
	log     *slog.Logger
	queue   *eventQueue
	metrics *metrics
	app     appSlot // the application's gossip (app.go)

	mu      sync.Mutex
	meta    []byte            // encoded Meta, as NodeMeta hands it out
	members map[string]Member // every member seen, as of its last event
}

// Start makes ep's node a cluster of one, named after ep's certificate, and
// gossiping over ep; call Join to meet the others. meta.Addr defaults to
// ep.Advertise(). At most one Membership may run on an endpoint.
func Start(ep *transport.Endpoint, meta Meta, cfg Config) (*Membership, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if meta.Addr == "" {
		meta.Addr = ep.Advertise()
	}
	encoded, err := encodeMeta(meta)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		log:     cfg.Logger.With("node", ep.Name()),
		queue:   newEventQueue(),
		metrics: newMetrics(),
		meta:    encoded,
		members: map[string]Member{},
	}
	mc := cfg.memberlistConfig(ep.Name())
	mc.Transport = newQUICTransport(ep)
	mc.Delegate = (*delegate)(m)
	mc.Events = (*delegate)(m)
	mc.Alive = (*delegate)(m)
	m.ml, err = memberlist.Create(mc)
	if err != nil {
		m.queue.close()
		return nil, fmt.Errorf("gossip: %w", err)
	}
	return m, nil
}

// Join contacts the seeds (host:port; this node's own address is fine) and
// syncs state with each that answers. It returns how many answered, and an
// error only if none did.
func (m *Membership) Join(seeds []string) (int, error) {
	return m.ml.Join(seeds)
}

// Leave tells the cluster this node is leaving — first in its metadata,
// then in memberlist's goodbye, waiting up to timeout for each to spread —
// and stops gossiping. A leaving agent should hand its blocks to their new
// owners first.
func (m *Membership) Leave(timeout time.Duration) error {
	err := m.UpdateMeta(func(meta *Meta) { meta.Leaving = true }, timeout)
	err = errors.Join(err, m.ml.Leave(timeout))
	return errors.Join(err, m.Shutdown())
}

// Shutdown stops gossiping without telling anyone: the others will declare
// this node dead. The Events channel closes.
func (m *Membership) Shutdown() error {
	err := m.ml.Shutdown()
	m.queue.close()
	return err
}

// Members lists the live members, this node included, sorted by name.
func (m *Membership) Members() []Member {
	return m.list(func(mem Member) bool { return mem.State == StateAlive })
}

// All lists every member seen since this node started, dead and departed
// ones included, sorted by name.
func (m *Membership) All() []Member {
	return m.list(func(Member) bool { return true })
}

func (m *Membership) list(keep func(Member) bool) []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		if keep(mem) {
			out = append(out, mem)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Local is this node as the others see it.
func (m *Membership) Local() Member { return m.member(m.ml.LocalNode(), StateAlive) }

// UpdateMeta changes this node's Meta (through f) and spreads it, waiting
// up to timeout for the broadcast to go out.
func (m *Membership) UpdateMeta(f func(*Meta), timeout time.Duration) error {
	m.mu.Lock()
	var meta Meta
	if err := json.Unmarshal(m.meta, &meta); err != nil {
		m.mu.Unlock()
		return err
	}
	f(&meta)
	encoded, err := encodeMeta(meta)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.meta = encoded
	m.mu.Unlock()
	return m.ml.UpdateNode(timeout)
}

// Events delivers membership changes in the order this node learnt them,
// none dropped; it closes after Shutdown. Events queue up while nobody
// reads.
func (m *Membership) Events() <-chan Event { return m.queue.out }

// Collector returns the membership's metrics for a Prometheus registry.
func (m *Membership) Collector() prometheus.Collector { return m.metrics }

func (m *Membership) member(n *memberlist.Node, state State) Member {
	mem := Member{Name: n.Name, Addr: hostPort(n.Addr, n.Port), State: state}
	if err := json.Unmarshal(n.Meta, &mem.Meta); err != nil {
		m.log.Warn("gossip: member has unreadable metadata", "member", n.Name, "err", err)
	}
	return mem
}

func encodeMeta(meta Meta) ([]byte, error) {
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip: metadata of %d bytes exceeds %d", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}
