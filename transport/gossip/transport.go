package gossip

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/kvmesh/kvmesh/transport"
)

// quicTransport is memberlist's Transport over a kvmesh endpoint: gossip
// packets travel as QUIC datagrams and state syncs as QUIC streams, so
// gossip shares the endpoint's one UDP port and its mutual TLS — a node
// without a certificate of the cluster CA cannot gossip at all.
type quicTransport struct {
	ep      *transport.Endpoint
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*quicTransport)(nil)

func newQUICTransport(ep *transport.Endpoint) *quicTransport {
	t := &quicTransport{
		ep:      ep,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		done:    make(chan struct{}),
	}
	t.wg.Go(t.forwardPackets)
	t.wg.Go(t.forwardStreams)
	return t
}

func (t *quicTransport) forwardPackets() {
	for {
		select {
		case p := <-t.ep.Packets():
			select {
			case t.packets <- &memberlist.Packet{Buf: p.Data, From: p.From, Timestamp: p.At}:
			case <-t.done:
				return
			}
		case <-t.done:
			return
		}
	}
}

func (t *quicTransport) forwardStreams() {
	for {
		select {
		case c := <-t.ep.GossipStreams():
			select {
			case t.streams <- c:
			case <-t.done:
				c.Close()
				return
			}
		case <-t.done:
			return
		}
	}
}

// FinalAdvertiseAddr is the endpoint's advertised address unless memberlist
// was given one.
func (t *quicTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		parsed := net.ParseIP(ip)
		if parsed == nil {
			return nil, 0, fmt.Errorf("gossip: advertise IP %q is not an IP", ip)
		}
		return parsed, port, nil
	}
	addr, err := net.ResolveUDPAddr("udp", t.ep.Advertise())
	if err != nil {
		return nil, 0, fmt.Errorf("gossip: endpoint advertises %q: %w", t.ep.Advertise(), err)
	}
	return addr.IP, addr.Port, nil
}

func (t *quicTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return time.Now(), t.ep.SendPacket(addr, b)
}

func (t *quicTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t *quicTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *quicTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return t.ep.DialGossip(ctx, addr)
}

func (t *quicTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

func (t *quicTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops handing traffic to memberlist; the endpoint, which the
// agent owns, keeps running.
func (t *quicTransport) Shutdown() error {
	t.once.Do(func() { close(t.done) })
	t.wg.Wait()
	return nil
}

func hostPort(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}
