package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/kvmesh/kvmesh/agent/localapi"
	"github.com/kvmesh/kvmesh/agent/mesh"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// DefaultBind is the mesh's UDP address when --bind is not given.
const DefaultBind = "0.0.0.0:7946"

// leaveTimeout bounds each step of leaving the mesh at shutdown.
const leaveTimeout = 5 * time.Second

var _ localapi.Backend = (*mesh.Node)(nil)

// ClusterMode reports whether the agent joins a mesh: only when it has an
// identity (TLSDir or Dev). Without one it is a single node, as with no
// flags at all.
func (c Config) ClusterMode() bool { return c.TLSDir != "" || c.Dev }

// checkCluster rejects mesh flags given without a mesh identity.
func (c Config) checkCluster() error {
	if c.ClusterMode() {
		if c.TLSDir != "" && c.Dev {
			return errors.New("--tls-dir and --dev exclude each other")
		}
		if c.Replicas < 0 {
			return fmt.Errorf("--replicas %d: need at least 1", c.Replicas)
		}
		if _, err := c.gossipConfig(); err != nil {
			return err
		}
		return nil
	}
	if len(c.Join) > 0 || c.Bind != "" || c.Advertise != "" || c.NodeName != "" || c.Replicas > 1 || (c.GossipProfile != "" && c.GossipProfile != "lan") {
		return errors.New("--join, --bind, --advertise, --node-name, --replicas and --gossip-profile need cluster mode: give --tls-dir DIR (a node certificate from the cluster CA) or --dev")
	}
	return nil
}

// gossipConfig is the gossip preset GossipProfile names.
func (c Config) gossipConfig() (gossip.Config, error) {
	switch c.GossipProfile {
	case "", "lan":
		return gossip.LAN(), nil
	case "local":
		return gossip.Local(), nil
	}
	return gossip.Config{}, fmt.Errorf("--gossip-profile %q: want lan or local", c.GossipProfile)
}

// identity is the node's mesh certificate: from TLSDir (its CN must match
// NodeName when that is set) or, under Dev, issued by the dev CA.
func (c Config) identity() (*tlsca.Identity, error) {
	if c.TLSDir != "" {
		id, err := tlsca.Load(c.TLSDir)
		if err != nil {
			return nil, fmt.Errorf("--tls-dir: %w", err)
		}
		if c.NodeName != "" && c.NodeName != id.Name {
			return nil, fmt.Errorf("--node-name %q differs from the certificate's CN %q in %s", c.NodeName, id.Name, c.TLSDir)
		}
		return id, nil
	}
	name := c.NodeName
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node-name not given and no hostname: %w", err)
		}
		name = h
	}
	var ips []net.IP
	for _, a := range []string{c.Advertise, c.Bind} {
		if host, _, err := net.SplitHostPort(a); err == nil {
			if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
				ips = append(ips, ip)
			}
		}
	}
	return tlsca.Dev(tlsca.DevCADir, name, ips, c.Logger)
}

// startMesh joins the agent to its cluster.
func (a *Agent) startMesh() error {
	id, err := a.cfg.identity()
	if err != nil {
		return err
	}
	gc, err := a.cfg.gossipConfig()
	if err != nil {
		return err
	}
	tc := transport.LAN()
	tc.Bind, tc.Advertise = a.cfg.Bind, a.cfg.Advertise
	if tc.Bind == "" {
		tc.Bind = DefaultBind
	}
	a.mesh, err = mesh.Start(a.store, mesh.Config{
		Identity: id, Transport: tc, Gossip: gc, Join: a.cfg.Join, Replicas: max(a.cfg.Replicas, 1),
		Capacity: a.cfg.MemCapacity + a.cfg.DiskCapacity, Version: a.cfg.Version,
		PeerTimeout: 2 * time.Second, Logger: a.log,
	})
	if err != nil {
		return fmt.Errorf("mesh on %s: %w", tc.Bind, err)
	}
	a.registry.MustRegister(a.mesh.Collectors()...)
	a.mesh.SharePolicies(a.policies) // a push or rollback on any agent reaches all
	return nil
}

// backend is what the local API serves: the mesh in cluster mode, the
// store otherwise.
func (a *Agent) backend() localapi.Backend {
	if a.mesh != nil {
		return a.mesh
	}
	return a.store
}

// storeServer is the kvmesh.v1.Store service over backend.
func (a *Agent) storeServer() *localapi.Server {
	s := localapi.New(a.backend(), a.cfg.Version).WithPools(a.pools)
	if a.mesh != nil {
		s.WithCluster(a.mesh)
	}
	return s
}

// Mesh is the agent's mesh membership, nil in single-node mode.
func (a *Agent) Mesh() *mesh.Node { return a.mesh }
