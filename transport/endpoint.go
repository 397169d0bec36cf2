// Package transport is kvmesh's one network endpoint between agents: a
// quic-go listener and dialer on a single UDP port, mutual TLS against the
// cluster CA (package tlsca), a pool of connections per peer, and one
// request per QUIC stream in the frame format of package frame.
//
// Three kinds of traffic share the port and the TLS identity:
//   - requests: Do on the client side, a Handler per opcode on the server;
//   - gossip packets: QUIC datagrams (a unidirectional stream when a packet
//     is larger than one datagram), see SendPacket and Packets;
//   - gossip streams: bidirectional streams opened with frame.OpGossip, see
//     DialGossip and GossipStreams.
//
// The UDP socket gets 7 MiB buffers (SO_RCVBUFFORCE/SO_SNDBUFFORCE where
// net.core.*mem_max is lower, a warning where both fail), sends with GSO
// (quic-go) and receives with GRO (groConn): the kernel moves runs of up to
// 64 KiB instead of single datagrams. Datagrams themselves grow to 8952
// bytes where path MTU discovery finds room (jumbo frames, loopback): the
// quic-go kvmesh builds is patched for that, see third_party/README.md.
//
// Bad input from a peer — a certificate from another CA, another protocol
// version, a malformed frame, an unknown opcode, a checksum mismatch, a stall
// past the deadline — ends that connection or that request with a status, a
// log line and a count in kvmesh_transport_refused_total; it never stops the
// endpoint.
package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/kvmesh/kvmesh/transport/frame"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// Stream and connection error codes this endpoint sends.
const (
	codeRefused  quic.StreamErrorCode = 1 // bad input: we stop reading the request
	codeCanceled quic.StreamErrorCode = 2 // the caller gave up (context, deadline)
	codeUnread   quic.StreamErrorCode = 3 // the rest of a response is not wanted

	closeShutdown quic.ApplicationErrorCode = 0
)

// Endpoint is one agent's QUIC endpoint. It is safe for concurrent use.
type Endpoint struct {
	cfg       Config
	id        *tlsca.Identity
	log       *slog.Logger
	advertise string

	udp   *net.UDPConn
	tr    *quic.Transport
	ln    *quic.EarlyListener
	qconf *quic.Config

	handlers [256]atomic.Pointer[Handler]
	pool     *pool
	m        *metrics
	refusals *refusals

	packets       chan Packet
	gossipStreams chan net.Conn

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	goMu   sync.Mutex // orders spawn against Close's Wait
	closed bool
	// live holds every connection being served, pooled or not, so Close
	// can tell each peer: closing the quic.Transport alone drops them
	// without a CONNECTION_CLOSE, and a peer would wait out its timeout.
	live map[*quic.Conn]struct{}
	// accepting is closed when acceptLoop has returned, the listener's
	// queue drained.
	accepting chan struct{}
}

// Listen binds cfg.Bind and starts accepting connections from peers that
// present a certificate of id's cluster CA.
func Listen(cfg Config, id *tlsca.Identity) (*Endpoint, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bind, err := net.ResolveUDPAddr("udp", cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("transport: bind %q: %w", cfg.Bind, err)
	}
	udp, err := net.ListenUDP("udp", bind)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	advertise, err := advertiseAddr(cfg.Advertise, udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		udp.Close()
		return nil, err
	}
	resetKey, err := id.Secret("quic stateless reset")
	if err != nil {
		udp.Close()
		return nil, err
	}
	log := cfg.Logger.With("node", id.Name)
	m := newMetrics()
	rcvBuf, sndBuf := sizeBuffers(udp, log)
	m.udpBuf.WithLabelValues("receive").Set(float64(rcvBuf))
	m.udpBuf.WithLabelValues("send").Set(float64(sndBuf))
	// quic-go sends with GSO on its own; receive offload is ours.
	var conn net.PacketConn = udp
	if gro := newGROConn(udp, m.largest); gro != nil {
		conn = gro
		m.gro.Set(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Endpoint{
		live:      map[*quic.Conn]struct{}{},
		cfg:       cfg,
		id:        id,
		log:       log,
		advertise: advertise,
		udp:       udp,
		tr: &quic.Transport{
			Conn: conn,
			// Derived from the node key, so after a restart this node
			// still resets the connections peers kept to its last run.
			StatelessResetKey: (*quic.StatelessResetKey)(&resetKey),
		},
		qconf: &quic.Config{
			HandshakeIdleTimeout:           cfg.DialTimeout,
			MaxIdleTimeout:                 cfg.IdleTimeout,
			KeepAlivePeriod:                cfg.KeepAlive,
			InitialStreamReceiveWindow:     cfg.StreamWindow,
			MaxStreamReceiveWindow:         cfg.StreamWindow,
			InitialConnectionReceiveWindow: cfg.ConnWindow,
			MaxConnectionReceiveWindow:     cfg.ConnWindow,
			MaxIncomingStreams:             cfg.MaxStreams,
			MaxIncomingUniStreams:          cfg.MaxStreams,
			Allow0RTT:                      true,
			EnableDatagrams:                true,
		},
		m:             m,
		refusals:      &refusals{m: m, log: cfg.Logger.With("node", id.Name), last: map[string]time.Time{}, skipped: map[string]int{}},
		packets:       make(chan Packet, 1024),
		gossipStreams: make(chan net.Conn),
		ctx:           ctx,
		cancel:        cancel,
	}
	e.pool = newPool(e)
	serverTLS, err := e.serverTLS()
	if err != nil {
		cancel()
		udp.Close()
		return nil, err
	}
	e.ln, err = e.tr.ListenEarly(serverTLS, e.qconf)
	if err != nil {
		cancel()
		udp.Close()
		return nil, fmt.Errorf("transport: %w", err)
	}
	e.accepting = make(chan struct{})
	e.spawn(e.acceptLoop)
	return e, nil
}

// advertiseAddr is the configured address, or the bound one with an
// unspecified IP replaced by this host's private IP.
func advertiseAddr(configured string, bound *net.UDPAddr) (string, error) {
	if configured != "" {
		if _, _, err := net.SplitHostPort(configured); err != nil {
			return "", fmt.Errorf("transport: advertise %q: %w", configured, err)
		}
		return configured, nil
	}
	if !bound.IP.IsUnspecified() {
		return bound.String(), nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil || ip == "" {
		return "", fmt.Errorf("transport: bound to %s and no private IP found to advertise; set Advertise", bound)
	}
	return net.JoinHostPort(ip, fmt.Sprint(bound.Port)), nil
}

// Name is this node's name, the CN of its certificate.
func (e *Endpoint) Name() string { return e.id.Name }

// Addr is the bound UDP address.
func (e *Endpoint) Addr() *net.UDPAddr { return e.udp.LocalAddr().(*net.UDPAddr) }

// Advertise is the host:port peers use to reach this endpoint.
func (e *Endpoint) Advertise() string { return e.advertise }

// Collector returns the endpoint's metrics for a Prometheus registry.
func (e *Endpoint) Collector() prometheus.Collector { return e.m }

// Handle routes requests with opcode op to h; requests for opcodes nobody
// registered are answered with StatusUnknownOpcode. It panics when op is
// frame.OpGossip or already has a handler: both are programming errors.
func (e *Endpoint) Handle(op frame.Opcode, h Handler) {
	if op == frame.OpGossip {
		panic("transport: opcode 0xFF is reserved for gossip streams")
	}
	if !e.handlers[op].CompareAndSwap(nil, &h) {
		panic(fmt.Sprintf("transport: opcode %#x registered twice", uint8(op)))
	}
}

// spawn runs f on a goroutine Close waits for, unless Close has begun.
func (e *Endpoint) spawn(f func()) bool {
	e.goMu.Lock()
	defer e.goMu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Go(f)
	return true
}

// serve serves conn on a goroutine Close waits for, counting it among the
// connections Close tells; once Close has begun it closes conn instead.
func (e *Endpoint) serve(conn *quic.Conn, dialled bool) {
	e.goMu.Lock()
	if e.closed {
		e.goMu.Unlock()
		conn.CloseWithError(closeShutdown, "endpoint closed")
		return
	}
	e.live[conn] = struct{}{}
	e.wg.Go(func() {
		e.serveConn(conn, dialled)
		e.goMu.Lock()
		delete(e.live, conn)
		e.goMu.Unlock()
	})
	e.goMu.Unlock()
}

// Close closes every connection (telling peers) and the UDP socket, and
// waits for the endpoint's goroutines, handlers included. Requests in
// flight fail.
func (e *Endpoint) Close() error {
	e.goMu.Lock()
	e.closed = true
	e.goMu.Unlock()
	// The listener first: handshakes in flight are refused, and
	// acceptLoop drains the connections already queued, closing each (it
	// can no longer serve them). Only then does no connection escape live.
	err := e.ln.Close()
	if e.accepting != nil {
		<-e.accepting
	}
	e.goMu.Lock()
	live := e.live
	e.live = nil
	e.goMu.Unlock()
	e.cancel()
	e.pool.closeAll()
	for c := range live {
		c.CloseWithError(closeShutdown, "endpoint closed")
	}
	if terr := e.tr.Close(); err == nil {
		err = terr
	}
	if uerr := e.udp.Close(); err == nil && !errors.Is(uerr, net.ErrClosed) {
		err = uerr
	}
	e.wg.Wait()
	return err
}

func (e *Endpoint) acceptLoop() {
	defer close(e.accepting)
	for {
		// Not e.ctx: Close closes the listener, and Accept returns once
		// the queue is empty.
		conn, err := e.ln.Accept(context.Background())
		if err != nil {
			return // listener closed
		}
		e.serve(conn, false)
	}
}
