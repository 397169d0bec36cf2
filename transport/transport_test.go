package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/kvmesh/kvmesh/transport/frame"
)

const (
	opGet  frame.Opcode = 0x01 // idempotent: returns the blob stored under the key
	opEcho frame.Opcode = 0x81 // changes state (as far as the transport knows): echoes the payload
)

// serveEcho answers opEcho with the request's payload, and opGet with
// blobs[key] or NotFound.
func serveEcho(n *testNode, blobs map[string][]byte) {
	n.Handle(opEcho, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			w.Error(err)
			return
		}
		w.Send(frame.StatusOK, Bytes(b))
	}))
	n.Handle(opGet, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		b, ok := blobs[string(req.Key)]
		if !ok {
			w.Error(&frame.Error{Status: frame.StatusNotFound, Msg: string(req.Key)})
			return
		}
		w.Send(frame.StatusOK, Bytes(b))
	}))
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func call(t testing.TB, from, to *testNode, c Call) ([]byte, error) {
	t.Helper()
	resp, err := from.Do(context.Background(), to.Advertise(), c)
	if err != nil {
		return nil, err
	}
	defer resp.Close()
	b := make([]byte, resp.Length)
	return b, resp.Fill(b)
}

func TestRequestRoundTrip(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	block := randomBytes(t, 4<<20+17)
	serveEcho(b, map[string][]byte{"block": block})

	var peer string
	b.Handle(0x02, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		peer = req.Peer
		w.Send(frame.StatusOK, Payload{})
	}))
	if _, err := call(t, a, b, Call{Op: 0x02}); err != nil || peer != "a" {
		t.Fatalf("request from a seen as from %q (%v)", peer, err)
	}
	got, err := call(t, a, b, Call{Op: opEcho, Body: Bytes(block)})
	if err != nil || !bytes.Equal(got, block) {
		t.Fatalf("echo of a 4 MiB block: %d bytes, %v", len(got), err)
	}
	got, err = call(t, a, b, Call{Op: opGet, Key: []byte("block")})
	if err != nil || !bytes.Equal(got, block) {
		t.Fatalf("get of a 4 MiB block: %d bytes, %v", len(got), err)
	}
	if _, err := call(t, a, b, Call{Op: opGet, Key: []byte("absent")}); !errors.Is(err, frame.ErrNotFound) {
		t.Fatalf("get of an absent key: %v, want ErrNotFound", err)
	}
	// b reaches a over the connection a opened: both ends listen on it.
	serveEcho(a, nil)
	if got, err := call(t, b, a, Call{Op: opEcho, Body: Bytes([]byte("back"))}); err != nil || string(got) != "back" {
		t.Fatalf("reverse request: %q, %v", got, err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	serveEcho(b, nil)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			want := randomBytes(t, i*37*1024)
			got, err := call(t, a, b, Call{Op: opEcho, Body: Bytes(want)})
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("request %d: %d bytes back, %v", i, len(got), err)
			}
		})
	}
	wg.Wait()
	if n := len(a.pool.peers); n != 1 {
		t.Fatalf("pool holds %d peers, want 1", n)
	}
	if n := len(a.pool.peers[b.Advertise()].conns); n > a.cfg.ConnsPerPeer {
		t.Fatalf("pool holds %d connections to b, ConnsPerPeer is %d", n, a.cfg.ConnsPerPeer)
	}
}

func TestUnknownOpcodeRefused(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	serveEcho(b, nil)
	_, err := call(t, a, b, Call{Op: 0x7E, Body: Bytes(randomBytes(t, 1<<20))})
	if !errors.Is(err, frame.ErrUnknownOpcode) {
		t.Fatalf("unknown opcode: %v, want ErrUnknownOpcode", err)
	}
	waitRefused(t, b, "server", "unknown_opcode")
	if _, err := call(t, a, b, Call{Op: opEcho}); err != nil {
		t.Fatalf("request after a refused one: %v", err)
	}
}

func TestChecksumMismatch(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	serveEcho(b, nil)
	body := Bytes(randomBytes(t, 100000))
	body.CRC ^= 1
	if _, err := call(t, a, b, Call{Op: opEcho, Body: body}); !errors.Is(err, frame.ErrChecksum) {
		t.Fatalf("request with a wrong checksum: %v, want ErrChecksum", err)
	}
	waitRefused(t, b, "server", "checksum")

	// And the other way: a response whose payload fails its checksum.
	b.Handle(0x03, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		p := Bytes([]byte("corrupted on the way"))
		p.CRC++
		w.Send(frame.StatusOK, p)
	}))
	if _, err := call(t, a, b, Call{Op: 0x03}); !errors.Is(err, frame.ErrChecksum) {
		t.Fatalf("response with a wrong checksum: %v, want ErrChecksum", err)
	}
	waitRefused(t, a, "client", "checksum")
}

// A response whose payload is shorter than its header said.
func TestShortResponseRefused(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	b.Handle(0x04, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		w.Send(frame.StatusOK, Payload{R: bytes.NewReader(make([]byte, 10)), Len: 20, CRC: 0})
	}))
	if _, err := call(t, a, b, Call{Op: 0x04}); !errors.Is(err, frame.ErrBadFrame) {
		t.Fatalf("short response: %v, want ErrBadFrame", err)
	}
	waitRefused(t, a, "client", "bad_frame")
}

// rawStream opens a stream to n with a cluster certificate but none of the
// endpoint's framing, to send malformed frames.
func rawStream(t *testing.T, from, to *testNode) *quic.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, to.Advertise(), from.clientTLS(to.Advertise()), &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.SetDeadline(time.Now().Add(5 * time.Second))
	return s
}

func header(t *testing.T, h frame.Header) []byte {
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMalformedFramesRefused(t *testing.T) {
	ca := newCA(t, "c")
	a := newNode(t, ca, "a", nil)
	b := newNode(t, ca, "b", func(c *Config) { c.MaxPayload = 1 << 20 })
	serveEcho(b, nil)
	payload := randomBytes(t, 100)
	sum := frame.Checksum(payload)
	wrongVersion := header(t, frame.Header{Code: uint8(opEcho)})
	wrongVersion[0] = frame.Version + 1
	longField := header(t, frame.Header{Code: uint8(opEcho)})
	longField[2], longField[3] = 0x7F, 0xFF

	for _, tc := range []struct {
		name   string
		send   []byte
		reason string
	}{
		{"payload shorter than declared", append(header(t, frame.Header{Code: uint8(opEcho), Length: 200, Checksum: sum}), payload...), "bad_frame"},
		{"payload longer than declared", append(header(t, frame.Header{Code: uint8(opEcho), Length: 50, Checksum: frame.Checksum(payload[:50])}), payload...), "bad_frame"},
		{"header cut short", header(t, frame.Header{Code: uint8(opEcho)})[:9], "bad_frame"},
		{"key length over the limit", longField, "bad_frame"},
		{"other frame version", wrongVersion, "bad_version"},
		{"payload over MaxPayload", header(t, frame.Header{Code: uint8(opEcho), Length: 2 << 20}), "too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.refused("server", tc.reason)
			s := rawStream(t, a, b)
			s.Write(tc.send)
			s.Close()
			h, err := frame.ReadHeader(s, 1<<20)
			if err != nil {
				t.Fatalf("no response header: %v", err)
			}
			if got := frame.Status(h.Code).String(); got != tc.reason {
				t.Fatalf("status %s (%s), want %s", got, h.Field, tc.reason)
			}
			eventually(t, time.Second, "refusal not counted", func() bool { return b.refused("server", tc.reason) > before })
		})
	}
	if !bytes.Contains([]byte(b.log.String()), []byte("reason=bad_version")) {
		t.Fatalf("no log line for the refused frames:\n%s", b.log)
	}
	if got, err := call(t, a, b, Call{Op: opEcho, Body: Bytes(payload)}); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("endpoint no longer serves after bad frames: %v", err)
	}
}

func TestStalledPeerLosesRequest(t *testing.T) {
	ca := newCA(t, "c")
	a := newNode(t, ca, "a", nil)
	b := newNode(t, ca, "b", func(c *Config) { c.ServeTimeout = 200 * time.Millisecond })
	serveEcho(b, nil)

	// A client that sends half its payload and goes quiet.
	s := rawStream(t, a, b)
	s.Write(append(header(t, frame.Header{Code: uint8(opEcho), Length: 1 << 20}), make([]byte, 1000)...))
	waitRefused(t, b, "server", "timeout")
	if _, err := frame.ReadHeader(s, 1<<20); err == nil {
		t.Fatal("a stalled request got a response")
	}

	// A server that sends half its response and goes quiet.
	b.Handle(0x05, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		w.Send(frame.StatusOK, Payload{R: io.MultiReader(bytes.NewReader(make([]byte, 1000)), stalled{ctx}), Len: 1 << 20})
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	resp, err := a.Do(ctx, b.Advertise(), Call{Op: 0x05})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	if _, err := io.ReadAll(resp); !errors.Is(err, frame.ErrTimeout) {
		t.Fatalf("reading a stalled response: %v, want ErrTimeout", err)
	}
	waitRefused(t, a, "client", "timeout")
}

// stalled is a reader that yields nothing until ctx ends.
type stalled struct{ ctx context.Context }

func (s stalled) Read([]byte) (int, error) {
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

func TestForeignCertificateRefused(t *testing.T) {
	ours := newCA(t, "ours")
	a, b := newNode(t, ours, "a", nil), newNode(t, ours, "b", nil)
	stranger := newNode(t, newCA(t, "theirs"), "stranger", nil)
	serveEcho(b, nil)
	serveEcho(stranger, nil)

	// The stranger cannot send requests: it does not trust b's
	// certificate, and b would not trust its own.
	if _, err := call(t, stranger, b, Call{Op: opEcho}); err == nil {
		t.Fatal("a node of another cluster sent a request")
	}
	waitRefused(t, stranger, "client", "certificate")
	// Nor can a member reach it.
	if _, err := call(t, a, stranger, Call{Op: opEcho}); err == nil {
		t.Fatal("a member sent a request to a node of another cluster")
	}
	waitRefused(t, a, "client", "certificate")

	// A client that skips verifying b but shows a foreign certificate, or
	// none, is refused by b.
	for name, certs := range map[string][]tls.Certificate{"foreign": {stranger.id.Cert}, "none": nil} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := quic.DialAddr(ctx, b.Advertise(), &tls.Config{
			Certificates: certs, InsecureSkipVerify: true, NextProtos: []string{frame.ALPN},
		}, &quic.Config{})
		cancel()
		if err == nil {
			// TLS 1.3: the server may refuse after the client finished.
			_, err = conn.AcceptStream(context.Background())
		}
		if err == nil {
			t.Fatalf("b accepted a client with %s certificate", name)
		}
	}
	waitRefused(t, b, "server", "certificate")
}

func TestOtherProtocolVersionRefused(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	conf := a.clientTLS(b.Advertise())
	conf.NextProtos = []string{"kvmesh/2"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := quic.DialAddr(ctx, b.Advertise(), conf, &quic.Config{}); err == nil {
		t.Fatal("b accepted a peer speaking kvmesh/2")
	}
	waitRefused(t, b, "server", "alpn")
}

// A reconnect to a known peer sends idempotent reads as 0-RTT data.
func TestReconnectUses0RTTForReads(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	blob := []byte("warm block")
	serveEcho(b, map[string][]byte{"k": blob})
	if _, err := call(t, a, b, Call{Op: opGet, Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	// Drop a's connections (a's pool only: b keeps serving, as after an
	// idle timeout), then read again; the session ticket that allows
	// 0-RTT comes a little after the handshake, hence the retries.
	eventually(t, 2*time.Second, "no reconnect used 0-RTT", func() bool {
		a.pool.closeAll()
		got, err := call(t, a, b, Call{Op: opGet, Key: []byte("k")})
		if err != nil || !bytes.Equal(got, blob) {
			t.Fatalf("read after reconnect: %q, %v", got, err)
		}
		a.pool.mu.Lock()
		defer a.pool.mu.Unlock()
		conns := a.pool.peers[b.Advertise()].conns
		return len(conns) > 0 && conns[0].ConnectionState().Used0RTT
	})
	// A request that changes state waits for the handshake, and works.
	if got, err := call(t, a, b, Call{Op: opEcho, Body: Bytes(blob)}); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("write on a 0-RTT connection: %q, %v", got, err)
	}
}

func TestClosedPeerFailsFast(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	serveEcho(b, nil)
	if _, err := call(t, a, b, Call{Op: opEcho}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	start := time.Now()
	if _, err := call(t, a, b, Call{Op: opEcho}); err == nil {
		t.Fatal("request to a closed endpoint succeeded")
	}
	if d := time.Since(start); d > 2*a.cfg.DialTimeout {
		t.Fatalf("request to a closed endpoint took %v", d)
	}
}

func TestPanickingHandlerFailsOnlyItsRequest(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	serveEcho(b, nil)
	b.Handle(0x06, HandlerFunc(func(ctx context.Context, req *Request, w *ResponseWriter) {
		panic("bug in a handler")
	}))
	if _, err := call(t, a, b, Call{Op: 0x06}); !errors.Is(err, frame.ErrInternal) {
		t.Fatalf("request to a panicking handler: %v, want ErrInternal", err)
	}
	if !bytes.Contains([]byte(b.log.String()), []byte("handler panicked")) {
		t.Fatalf("no log line for the panic:\n%s", b.log)
	}
	if _, err := call(t, a, b, Call{Op: opEcho}); err != nil {
		t.Fatalf("endpoint no longer serves after a panic: %v", err)
	}
}
