package gossip_test

import (
	"context"
	"io"
	"log"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/placement"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// How an agent wires the mesh: one endpoint, membership over it, a remote
// tier handler on it, placement rebuilt from membership events.
func Example() {
	logger := slog.Default()
	id, err := tlsca.Load("/etc/kvmesh/tls") // --tls-dir; tlsca.Dev(...) under --dev
	if err != nil {
		log.Fatal(err)
	}
	tc := transport.LAN()
	tc.Bind, tc.Advertise, tc.Logger = "0.0.0.0:7946", "10.0.0.5:7946", logger // --bind, --advertise
	ep, err := transport.Listen(tc, id)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()

	// The store's remote tier serves its opcodes (below 0x80: reads, safe
	// as 0-RTT; from 0x80: writes).
	const opGetBlock frame.Opcode = 0x01
	ep.Handle(opGetBlock, transport.HandlerFunc(func(ctx context.Context, req *transport.Request, w *transport.ResponseWriter) {
		w.Error(&frame.Error{Status: frame.StatusNotFound, Msg: string(req.Key)})
	}))

	gc := gossip.LAN()
	gc.Logger = logger
	members, err := gossip.Start(ep, gossip.Meta{Capacity: 256 << 30, Version: "v0.1.0"}, gc)
	if err != nil {
		log.Fatal(err)
	}
	defer members.Leave(5 * time.Second)                               // after handing blocks off
	if _, err := members.Join([]string{"10.0.0.1:7946"}); err != nil { // --join
		logger.Warn("no seed answered; running alone", "err", err)
	}
	prometheus.MustRegister(ep.Collector(), members.Collector())

	// Placement follows membership: rebuild the table on every event.
	table := func() *placement.Table {
		var ms []placement.Member
		for _, m := range members.Members() {
			ms = append(ms, placement.Member{Name: m.Name, Weight: float64(m.Meta.Capacity)})
		}
		return placement.New(ms)
	}
	var current atomic.Pointer[placement.Table]
	current.Store(table())
	go func() {
		for range members.Events() {
			current.Store(table())
		}
	}()

	// Read a block from its first owner that is not us.
	key := []byte("model-a/0123abcd_key_0")
	for _, owner := range current.Load().Owners(key, 2) {
		if owner == ep.Name() {
			continue
		}
		for _, m := range members.Members() {
			if m.Name != owner {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := ep.Do(ctx, m.Meta.Addr, transport.Call{Op: opGetBlock, Key: key})
			if err == nil {
				io.Copy(io.Discard, resp) // a real reader Fills the client's buffer
				resp.Close()
			}
			cancel()
		}
	}
}
