package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	"github.com/quic-go/quic-go"
)

// maxQueuedPackets bounds the gossip packets kept for a peer while the
// first connection to it is being dialled.
const maxQueuedPackets = 64

// pool keeps up to ConnsPerPeer live connections per peer address, dialled
// or accepted: a connection a peer opened to us carries our requests to it
// as well, since both ends listen on the one socket it came from.
type pool struct {
	e     *Endpoint
	mu    sync.Mutex
	peers map[string]*peer // by canonical "ip:port", and by each other form asked for
}

type peer struct {
	addr  *net.UDPAddr
	tls   *tls.Config
	conns []*quic.Conn
	next  int // round-robin position

	dialing chan struct{} // closed when the dial in flight ends; nil if none
	dialErr error         // why the last dial failed
	queued  [][]byte      // gossip packets waiting for a connection
}

func newPool(e *Endpoint) *pool {
	return &pool{e: e, peers: map[string]*peer{}}
}

// lookup returns the entry for addr, creating it. It resolves a new
// address outside the lock (a host name costs a DNS query) and remembers it
// under both the given and the canonical form, so a peer named two ways
// shares one entry; a host name is resolved once.
func (p *pool) lookup(addr string) (*peer, error) {
	p.mu.Lock()
	pe := p.peers[addr]
	p.mu.Unlock()
	if pe != nil {
		return pe, nil
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: peer address %q: %w", addr, err)
	}
	key := ua.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if pe = p.peers[key]; pe == nil {
		pe = &peer{addr: ua, tls: p.e.clientTLS(key)}
		p.peers[key] = pe
	}
	p.peers[addr] = pe
	return pe, nil
}

// pruneLocked forgets connections that have closed.
func pruneLocked(pe *peer) {
	live := pe.conns[:0]
	for _, c := range pe.conns {
		if c.Context().Err() == nil {
			live = append(live, c)
		}
	}
	clear(pe.conns[len(live):])
	pe.conns = live
}

// pickLocked returns the next live connection to pe, or nil, and starts a
// dial when pe has fewer than want connections.
func (p *pool) pickLocked(pe *peer, want int) *quic.Conn {
	pruneLocked(pe)
	if len(pe.conns) < want && pe.dialing == nil {
		pe.dialing = make(chan struct{})
		if !p.e.spawn(func() { p.dial(pe) }) {
			pe.dialing = nil // closed: no more dials
		}
	}
	if len(pe.conns) == 0 {
		return nil
	}
	pe.next++
	return pe.conns[pe.next%len(pe.conns)]
}

// get returns a connection to addr, dialling if there is none, and growing
// the peer's set towards want connections in the background.
func (p *pool) get(ctx context.Context, addr string, want int) (*quic.Conn, error) {
	pe, err := p.lookup(addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if c := p.pickLocked(pe, want); c != nil {
		p.mu.Unlock()
		return c, nil
	}
	wait := pe.dialing
	p.mu.Unlock()
	if wait == nil {
		return nil, net.ErrClosed
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.pickLocked(pe, want); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("transport: dial %s: %w", addr, pe.dialErr)
}

// connOrQueue returns a live connection to addr, or queues b (when there is
// room) for the dial it starts, returning nil. Gossip is light: one
// connection per peer carries it.
func (p *pool) connOrQueue(addr string, b []byte) (*quic.Conn, error) {
	pe, err := p.lookup(addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.pickLocked(pe, 1); c != nil {
		return c, nil
	}
	if len(pe.queued) < maxQueuedPackets {
		pe.queued = append(pe.queued, append([]byte(nil), b...))
	} else {
		p.e.m.gossip.WithLabelValues("dropped", "datagram").Inc()
	}
	return nil, nil
}

func (p *pool) dial(pe *peer) {
	ctx, cancel := context.WithTimeout(p.e.ctx, p.e.cfg.DialTimeout)
	defer cancel()
	conn, err := p.e.tr.DialEarly(ctx, pe.addr, pe.tls, p.e.qconf)

	p.mu.Lock()
	queued := pe.queued
	pe.queued = nil
	if err == nil {
		pe.conns = append(pe.conns, conn)
		p.e.serve(conn, true)
	}
	pe.dialErr = err
	close(pe.dialing)
	pe.dialing = nil
	p.mu.Unlock()

	if err != nil {
		p.e.m.dials.WithLabelValues("error").Inc()
		p.e.m.gossip.WithLabelValues("dropped", "datagram").Add(float64(len(queued)))
		return
	}
	p.e.m.dials.WithLabelValues("ok").Inc()
	for _, b := range queued {
		p.e.sendPacket(conn, b)
	}
}

// adopt adds a connection a peer opened to us to that peer's entry, up to
// ConnsPerPeer.
func (p *pool) adopt(conn *quic.Conn) {
	pe, err := p.lookup(conn.RemoteAddr().String())
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pruneLocked(pe)
	if len(pe.conns) < p.e.cfg.ConnsPerPeer {
		pe.conns = append(pe.conns, conn)
	}
}

// closeAll closes every pooled connection, telling each peer.
func (p *pool) closeAll() {
	p.mu.Lock()
	var conns []*quic.Conn
	for _, pe := range p.peers {
		conns = append(conns, pe.conns...)
		pe.conns = nil
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.CloseWithError(closeShutdown, "endpoint closed")
	}
}
