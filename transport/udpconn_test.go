package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// TestGROSplitsCoalescedDatagrams sends runs of segments with UDP_SEGMENT
// (as quic-go does) to a groConn and checks that ReadBatch hands them back
// one datagram per message, in order, with the short last segment intact,
// across more ReadBatch calls than one batch holds, dropping (and not
// reporting as the largest) what the reader has no room for.
func TestGROSplitsCoalescedDatagrams(t *testing.T) {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	largest := prometheus.NewGauge(prometheus.GaugeOpts{Name: "largest"})
	c := newGROConn(rx, largest)
	if c == nil {
		t.Skip("kernel refuses UDP_GRO")
	}
	tx, err := net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()

	const seg = 1200
	var want [][]byte
	send := func(segments int, last int) {
		payload := randomBytes(t, (segments-1)*seg+last)
		for off := 0; off < len(payload); off += seg {
			want = append(want, payload[off:min(off+seg, len(payload))])
		}
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], seg)
		if _, _, err := tx.WriteMsgUDP(payload, oob, nil); err != nil {
			t.Skipf("GSO send: %v", err)
		}
	}
	send(20, 700)                // 19 full segments and a short one
	send(1, 5)                   // a lone datagram
	tx.Write(make([]byte, 0))    // an empty one, which is dropped
	tx.Write(make([]byte, 2000)) // one larger than the reader's buffers: dropped, not reported
	send(3, seg)

	ms := make([]ipv4.Message, 8)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 1452)}
		ms[i].OOB = make([]byte, 128)
	}
	var got [][]byte
	for len(got) < len(want) {
		n, err := c.ReadBatch(ms, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 && c.seg != seg {
			t.Fatalf("the first run arrived with segment size %d, want %d: not coalesced", c.seg, seg)
		}
		for _, m := range ms[:n] {
			if m.Addr.String() != tx.LocalAddr().String() {
				t.Fatalf("datagram from %v, want %v", m.Addr, tx.LocalAddr())
			}
			got = append(got, bytes.Clone(m.Buffers[0][:m.N]))
		}
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %d bytes, want %d (of %d datagrams)", i, len(got[i]), len(want[i]), len(want))
		}
	}
	var m dto.Metric
	if largest.Write(&m); m.GetGauge().GetValue() != seg {
		t.Errorf("largest datagram reported as %v, want %d", m.GetGauge().GetValue(), seg)
	}
}

// TestSocketOffloads checks what the endpoint's socket runs with: receive
// offload on (groConn), segmentation offload on for its connections,
// packets beyond Ethernet's 1452 bytes where the path allows (loopback's MTU
// is 64 KiB; the patched quic-go, third_party/README.md), and AES-GCM as the
// TLS 1.3 cipher suite (hardware AES is the cheapest).
func TestSocketOffloads(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	if _, ok := a.tr.Conn.(*groConn); !ok {
		t.Skip("kernel refuses UDP_GRO")
	}
	serveEcho(b, map[string][]byte{"k": randomBytes(t, 1<<20)})
	if _, err := call(t, a, b, Call{Op: opGet, Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	conn, err := a.pool.get(context.Background(), b.Advertise(), 1)
	if err != nil {
		t.Fatal(err)
	}
	st := conn.ConnectionState()
	if !st.GSO {
		t.Error("connection sends without GSO")
	}
	var m dto.Metric
	if a.m.gro.Write(&m); m.GetGauge().GetValue() != 1 {
		t.Errorf("kvmesh_transport_udp_gro = %v, want 1", m.GetGauge().GetValue())
	}
	// Path MTU discovery probes every few round trips once the handshake
	// is confirmed; keep data flowing until it has grown the packets.
	largest := func() float64 { a.m.largest.Write(&m); return m.GetGauge().GetValue() }
	eventually(t, 10*time.Second, "packets never grew beyond 1452 bytes on loopback", func() bool {
		if _, err := call(t, a, b, Call{Op: opGet, Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
		return largest() > 1452
	})
	if got := largest(); got > 8952 {
		t.Errorf("a %v-byte datagram: larger than quic-go's patched maximum, 8952", got)
	}
	if cs := st.TLS.CipherSuite; cs != tls.TLS_AES_128_GCM_SHA256 && cs != tls.TLS_AES_256_GCM_SHA384 {
		t.Errorf("cipher suite %s, want AES-GCM", tls.CipherSuiteName(cs))
	}
}

// TestStreamedPayload sends a payload from a plain io.Reader (the pooled
// copy path) larger than one copy buffer and not a multiple of it.
func TestStreamedPayload(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	serveEcho(b, nil)
	want := randomBytes(t, 3*copyBufferSize+123)
	body := Payload{R: io.MultiReader(bytes.NewReader(want[:1000]), bytes.NewReader(want[1000:])), Len: uint64(len(want)), CRC: frame.Checksum(want)}
	got, err := call(t, a, b, Call{Op: opEcho, Body: body})
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("streamed payload: %d bytes back, %v", len(got), err)
	}
}

// TestBufferSizing: as root the buffers reach socketBuffer whatever
// net.core.rmem_max says (SO_RCVBUFFORCE); otherwise they are at most it
// and a warning says how to fix it.
func TestBufferSizing(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	logs := &logBuf{}
	rcv, snd := sizeBuffers(udp, slog.New(slog.NewTextHandler(logs, nil)))
	if unix.Geteuid() == 0 && (rcv < socketBuffer || snd < socketBuffer) {
		t.Fatalf("as root: buffers %d/%d, want %d; log:\n%s", rcv, snd, socketBuffer, logs)
	}
	if (rcv < socketBuffer || snd < socketBuffer) != (logs.String() != "") {
		t.Fatalf("buffers %d/%d, want %d, and log:\n%s", rcv, snd, socketBuffer, logs)
	}
}
