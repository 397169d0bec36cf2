package transport

import (
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// socketBuffer is the UDP send and receive buffer an endpoint asks for:
// what quic-go wants (7 MiB) so that a burst of a whole block's packets is
// not dropped before the read loop drains it.
const socketBuffer = 7 << 20

// sizeBuffers raises udp's receive and send buffers to socketBuffer: first
// within net.core.{r,w}mem_max, then, where that caps them, with
// SO_RCVBUFFORCE / SO_SNDBUFFORCE (root or CAP_NET_ADMIN). It never needs a
// sysctl; when neither works it logs what it got and what would fix it, and
// the endpoint runs with the smaller buffers (at the price of drops under
// bursts). quic-go would try the same, but logs through the standard logger.
func sizeBuffers(udp *net.UDPConn, log *slog.Logger) (rcv, snd int) {
	raw, err := udp.SyscallConn()
	if err != nil {
		return 0, 0
	}
	get := func(opt int) int {
		var v int
		raw.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt) })
		return v / 2 // the kernel reports twice what was asked for: its bookkeeping overhead
	}
	set := func(name, sysctl string, opt, force int, setter func(int) error) int {
		if got := get(opt); got >= socketBuffer {
			return got
		}
		setter(socketBuffer)
		if get(opt) < socketBuffer {
			raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, force, socketBuffer) })
		}
		got := get(opt)
		if got < socketBuffer {
			log.Warn("transport: UDP "+name+" buffer is smaller than wanted; bursts may be dropped and retransmitted",
				"got_kib", got>>10, "want_kib", socketBuffer>>10,
				"fix", "run the agent as root or with CAP_NET_ADMIN, or raise sysctl "+sysctl)
		}
		return got
	}
	return set("receive", "net.core.rmem_max", unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, udp.SetReadBuffer),
		set("send", "net.core.wmem_max", unix.SO_SNDBUF, unix.SO_SNDBUFFORCE, udp.SetWriteBuffer)
}

// groBatch is how many datagrams one receive system call may return; each
// may be a coalesced run of up to 64 KiB.
const groBatch = 8

// groConn is the endpoint's UDP socket with receive offload (UDP_GRO) on:
// the kernel hands up a run of same-sized datagrams from one sender as one
// buffer, instead of splitting every segmented (GSO) send back into
// single datagrams, each its own socket-buffer entry. quic-go sends with
// GSO but does not turn on GRO, so groConn splits the runs itself: it is
// the ReadBatch quic-go's read loop calls, returning one datagram per
// message as a plain socket would. Everything else (writes with GSO, ECN and
// packet-info control messages, deadlines, Close) is the *net.UDPConn's.
//
// It is read by quic-go's one read loop per socket, never concurrently.
type groConn struct {
	*net.UDPConn
	batch *ipv4.PacketConn
	msgs  []ipv4.Message // receive buffers, 64 KiB each
	n, i  int            // messages the last system call returned; the one being split
	rest  []byte         // what is left of message i
	seg   int            // its segment size

	largest  int              // the largest datagram handed to quic-go so far
	reportTo prometheus.Gauge // where largest is published
}

// newGROConn turns on UDP_GRO on udp and wraps it, or returns nil when the
// kernel refuses (before Linux 5.0) or KVMESH_DISABLE_GRO is true (a kill
// switch, as quic-go's QUIC_GO_DISABLE_GSO), leaving udp as it was.
func newGROConn(udp *net.UDPConn, largest prometheus.Gauge) *groConn {
	if off, _ := strconv.ParseBool(os.Getenv("KVMESH_DISABLE_GRO")); off {
		return nil
	}
	raw, err := udp.SyscallConn()
	if err != nil {
		return nil
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) }); err != nil || serr != nil {
		return nil
	}
	c := &groConn{UDPConn: udp, batch: ipv4.NewPacketConn(udp), msgs: make([]ipv4.Message, groBatch), reportTo: largest}
	for i := range c.msgs {
		c.msgs[i].Buffers = [][]byte{make([]byte, 1<<16)}
		c.msgs[i].OOB = make([]byte, 128)
	}
	return c
}

// ReadBatch fills ms with single datagrams, splitting coalesced runs. It
// blocks only when it has nothing at all to return.
func (c *groConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	k := 0
	for k < len(ms) {
		if len(c.rest) == 0 && !c.next() {
			if k > 0 {
				return k, nil
			}
			n, err := c.batch.ReadBatch(c.msgs, flags)
			if err != nil {
				return 0, err
			}
			c.n, c.i = n, -1
			continue
		}
		size := min(c.seg, len(c.rest))
		m, src := &ms[k], &c.msgs[c.i]
		if size <= len(m.Buffers[0]) { // larger ones would be truncated: no QUIC packet of ours is
			if size > c.largest {
				c.largest = size
				c.reportTo.Set(float64(size))
			}
			m.N = copy(m.Buffers[0], c.rest[:size])
			m.NN = copy(m.OOB, src.OOB[:src.NN])
			m.Flags, m.Addr = 0, src.Addr
			k++
		}
		c.rest = c.rest[size:]
	}
	return k, nil
}

// next moves to the next message the last system call returned, reading
// its segment size from the UDP_GRO control message (none: one datagram).
func (c *groConn) next() bool {
	for c.i+1 < c.n {
		c.i++
		m := &c.msgs[c.i]
		if m.Flags&unix.MSG_TRUNC != 0 || m.N == 0 {
			continue
		}
		c.rest, c.seg = m.Buffers[0][:m.N], m.N
		if s := groSegment(m.OOB[:m.NN]); s > 0 {
			c.seg = s
		}
		return true
	}
	return false
}

// groSegment is the segment size a UDP_GRO control message declares, or 0.
func groSegment(oob []byte) int {
	for len(oob) > 0 {
		h, body, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(body) >= 4 {
			return int(binary.NativeEndian.Uint32(body))
		}
		oob = rest
	}
	return 0
}
