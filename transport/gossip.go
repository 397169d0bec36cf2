package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// Packet is a gossip packet that arrived from a peer.
type Packet struct {
	Data []byte
	From net.Addr
	// At is when it arrived, for memberlist's round-trip estimates.
	At time.Time
}

// MaxGossipPacket bounds a gossip packet; one larger than a QUIC datagram
// travels on a unidirectional stream of its own.
const MaxGossipPacket = 1 << 20

// Packets delivers the gossip packets peers send. Packets arriving while the
// channel is full are dropped (and counted), as UDP would drop them.
func (e *Endpoint) Packets() <-chan Packet { return e.packets }

// GossipStreams delivers the gossip streams peers open with DialGossip. A
// stream nobody takes within ServeTimeout is closed.
func (e *Endpoint) GossipStreams() <-chan net.Conn { return e.gossipStreams }

// SendPacket sends a gossip packet to addr, best effort like UDP: as one
// QUIC datagram, or on a unidirectional stream when too large for one. It
// never waits for a handshake: with no connection to addr yet it queues the
// packet, dials in the background and sends it once connected, dropping it
// if the dial fails.
func (e *Endpoint) SendPacket(addr string, b []byte) error {
	if len(b) > MaxGossipPacket {
		return fmt.Errorf("transport: gossip packet of %d bytes exceeds %d", len(b), MaxGossipPacket)
	}
	conn, err := e.pool.connOrQueue(addr, b)
	if err != nil || conn == nil {
		return err
	}
	e.sendPacket(conn, b)
	return nil
}

func (e *Endpoint) sendPacket(conn *quic.Conn, b []byte) {
	// A pooled connection may have been dialled for 0-RTT and still be
	// handshaking; quic-go's datagram support is only settled (and safe to
	// read) once the peer's parameters are in, so wait off this goroutine.
	select {
	case <-conn.HandshakeComplete():
	default:
		b := append([]byte(nil), b...) // the caller may reuse b once we return
		e.spawn(func() {
			select {
			case <-conn.HandshakeComplete():
				e.sendPacket(conn, b)
			case <-conn.Context().Done():
				e.m.gossip.WithLabelValues("dropped", "datagram").Inc()
			}
		})
		return
	}
	err := conn.SendDatagram(b)
	var tooLarge *quic.DatagramTooLargeError
	switch {
	case err == nil:
		e.m.gossip.WithLabelValues("sent", "datagram").Inc()
	case errors.As(err, &tooLarge):
		b := append([]byte(nil), b...) // the caller may reuse b once we return
		e.spawn(func() { e.sendPacketStream(conn, b) })
	default:
		e.m.gossip.WithLabelValues("dropped", "datagram").Inc()
	}
}

func (e *Endpoint) sendPacketStream(conn *quic.Conn, b []byte) {
	ctx, cancel := context.WithTimeout(conn.Context(), e.cfg.RequestTimeout)
	defer cancel()
	s, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		e.m.gossip.WithLabelValues("dropped", "stream").Inc()
		return
	}
	s.SetWriteDeadline(time.Now().Add(e.cfg.RequestTimeout))
	if _, err := s.Write(b); err != nil {
		s.CancelWrite(codeCanceled)
		e.m.gossip.WithLabelValues("dropped", "stream").Inc()
		return
	}
	s.Close()
	e.m.gossip.WithLabelValues("sent", "stream").Inc()
}

// deliver hands a packet to the gossip layer, or drops it when the layer
// is not keeping up (or not there).
func (e *Endpoint) deliver(conn *quic.Conn, b []byte, carrier string) {
	select {
	case e.packets <- Packet{Data: b, From: conn.RemoteAddr(), At: time.Now()}:
		e.m.gossip.WithLabelValues("received", carrier).Inc()
	default:
		e.m.gossip.WithLabelValues("dropped", carrier).Inc()
	}
}

func (e *Endpoint) receiveDatagrams(conn *quic.Conn) {
	for {
		b, err := conn.ReceiveDatagram(conn.Context())
		if err != nil {
			return
		}
		e.deliver(conn, b, "datagram")
	}
}

func (e *Endpoint) receiveUniStreams(conn *quic.Conn) {
	for {
		s, err := conn.AcceptUniStream(conn.Context())
		if err != nil {
			return
		}
		e.spawn(func() { e.readPacketStream(conn, s) })
	}
}

func (e *Endpoint) readPacketStream(conn *quic.Conn, s *quic.ReceiveStream) {
	s.SetReadDeadline(time.Now().Add(e.cfg.ServeTimeout))
	b, err := io.ReadAll(io.LimitReader(s, MaxGossipPacket+1))
	if err == nil && len(b) > MaxGossipPacket {
		err = &frame.Error{Status: frame.StatusTooLarge, Msg: fmt.Sprintf("gossip packet over %d bytes", MaxGossipPacket)}
	}
	if err != nil {
		e.refusals.record("server", refusalReason(err), conn.RemoteAddr().String(), err)
		s.CancelRead(codeRefused)
		return
	}
	e.deliver(conn, b, "stream")
}

// DialGossip opens a gossip stream to addr: a net.Conn whose bytes, both
// ways, belong to memberlist. It waits for the handshake: state sync is
// never sent as 0-RTT data.
func (e *Endpoint) DialGossip(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := e.pool.get(ctx, addr, 1)
	if err != nil {
		return nil, err
	}
	if err := usable(ctx, conn); err != nil {
		return nil, err
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	hdr, _ := frame.Header{Code: uint8(frame.OpGossip)}.Append(nil)
	if deadline, ok := ctx.Deadline(); ok {
		s.SetWriteDeadline(deadline)
	}
	if _, err := s.Write(hdr); err != nil {
		s.CancelRead(codeCanceled)
		s.CancelWrite(codeCanceled)
		return nil, err
	}
	s.SetWriteDeadline(time.Time{})
	return &streamConn{Stream: s, local: conn.LocalAddr(), remote: conn.RemoteAddr()}, nil
}

// acceptGossipStream hands an incoming gossip stream to GossipStreams.
func (e *Endpoint) acceptGossipStream(ctx context.Context, conn *quic.Conn, s *quic.Stream) {
	s.SetDeadline(time.Time{}) // memberlist sets its own
	c := &streamConn{Stream: s, local: conn.LocalAddr(), remote: conn.RemoteAddr()}
	select {
	case e.gossipStreams <- c:
	case <-ctx.Done():
		c.Close()
	}
}

// streamConn is a QUIC stream as a net.Conn.
type streamConn struct {
	*quic.Stream
	local, remote net.Addr
}

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

// Close ends both directions: it finishes what we wrote and tells the peer
// we read no more.
func (c *streamConn) Close() error {
	c.Stream.CancelRead(codeUnread)
	return c.Stream.Close()
}
