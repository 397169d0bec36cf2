package localapi

import (
	"context"

	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
	"github.com/kvmesh/kvmesh/transport/gossip"
)

// WithCluster lets the Members RPC report the mesh c (cluster mode).
func (s *Server) WithCluster(c Cluster) *Server {
	s.cluster = c
	return s
}

// Members lists the cluster; in single-node mode the list is empty. This
// agent's own block count is read from its store, not from gossip, so it
// is current.
func (s *Server) Members(context.Context, *kvmeshv1.MembersRequest) (*kvmeshv1.MembersResponse, error) {
	if s.cluster == nil {
		return &kvmeshv1.MembersResponse{Replicas: 1}, nil
	}
	out := &kvmeshv1.MembersResponse{Self: s.cluster.Self(), Replicas: uint32(s.cluster.Replicas())}
	for _, m := range s.cluster.Members() {
		pm := &kvmeshv1.Member{Name: m.Name, Address: m.Meta.Addr, State: memberState(m),
			Capacity: m.Meta.Capacity, Blocks: m.Meta.Blocks, Version: m.Meta.Version}
		if m.Name == out.Self {
			pm.Blocks = s.store.Stat().Blocks
		}
		out.Members = append(out.Members, pm)
	}
	return out, nil
}

// memberState is gossip's state, with "leaving" for a live member that
// announced its departure.
func memberState(m gossip.Member) string {
	if m.State == gossip.StateAlive && m.Meta.Leaving {
		return "leaving"
	}
	return m.State.String()
}
