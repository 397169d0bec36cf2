package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// The opcodes benchTransport's QUIC server answers, as agent/mesh's get and
// put: a get (idempotent) is answered with the block, a put is read,
// verified and acknowledged.
const (
	opBenchGet frame.Opcode = 0x02
	opBenchPut frame.Opcode = 0x80
)

// benchTransport moves the same bytes, in the same frames, between two
// endpoints on loopback three ways — kvmesh's QUIC transport, TLS 1.3 over
// TCP, plain TCP — with the same number of requests in flight over the same
// number of connections, so the figures compare transports, not framing or
// concurrency. By default it does what the agent does when it reads a remote
// block: concurrent gets of whole blocks, each response verified against its
// crc32c by the receiver before the block counts.
func benchTransport(args []string) error {
	fs := flag.NewFlagSet("bench transport", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	total := fs.Int64("total", 1<<30, "bytes per measurement")
	blockSize := fs.Int("block-size", 4<<20, "bytes per block (one request)")
	op := fs.String("op", "get", "get: the client reads blocks from the server (a remote read); put: it writes them (replication)")
	inflight := fs.Int("inflight", 8, "requests in flight at once, on every transport")
	conns := fs.Int("conns", transport.LAN().ConnsPerPeer, "connections per peer, on every transport (TCP: requests in flight are pipelined over them)")
	rounds := fs.Int("rounds", 3, "measurements of each transport, interleaved; the median is reported")
	only := fs.String("only", "quic,tls_tcp,tcp", "comma-separated transports to measure")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurements (both ends: they share this process) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *blockSize < 1 || *total < int64(*blockSize) || *inflight < 1 || *conns < 1 || *rounds < 1 {
		return errors.New("bench transport: sizes, --inflight, --conns and --rounds must be positive, --total at least one block")
	}
	if *op != "get" && *op != "put" {
		return fmt.Errorf("bench transport: --op %q: want get or put", *op)
	}
	if *conns > *inflight {
		*conns = *inflight // a connection with nothing in flight measures nothing
	}
	blocks := int(*total / int64(*blockSize))
	block := make([]byte, *blockSize)
	rand.Read(block)

	ca, err := tlsca.NewCA("bench", time.Hour)
	if err != nil {
		return err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	serverID, err := ca.Issue("bench-server", loopback, time.Hour)
	if err != nil {
		return err
	}
	clientID, err := ca.Issue("bench-client", loopback, time.Hour)
	if err != nil {
		return err
	}

	b := &benchSetup{get: *op == "get", block: block, sum: frame.Checksum(block), inflight: *inflight, conns: *conns}
	quicRun, closeQUIC, err := b.quic(serverID, clientID)
	if err != nil {
		return err
	}
	defer closeQUIC()
	all := []struct {
		name string
		run  func(blocks int) error
	}{
		{"quic", quicRun},
		{"tls_tcp", func(n int) error { return b.tcp(serverID, clientID, true, n) }},
		{"tcp", func(n int) error { return b.tcp(serverID, clientID, false, n) }},
	}
	want := strings.Split(*only, ",")
	runs := all[:0:0]
	for _, r := range all {
		if slices.Contains(want, r.name) {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return fmt.Errorf("bench transport: --only %q names no transport (have quic, tls_tcp, tcp)", *only)
	}
	// One warm-up block each: handshakes, pools and buffers are not what
	// is measured.
	for _, r := range runs {
		if err := r.run(min(blocks, *inflight)); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	gb := float64(blocks) * float64(*blockSize) / 1e9
	samples, cpu := map[string][]float64{}, map[string][]float64{}
	for range *rounds {
		for _, r := range runs {
			start, cpuStart := time.Now(), cpuTime()
			if err := r.run(blocks); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			samples[r.name] = append(samples[r.name], gb/time.Since(start).Seconds())
			cpu[r.name] = append(cpu[r.name], (cpuTime()-cpuStart).Seconds()/gb)
		}
	}
	median := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		xs = slices.Sorted(slices.Values(xs))
		return xs[len(xs)/2]
	}
	res := struct {
		QUICGBps    float64              `json:"quic_gbps"`
		TLSTCPGBps  float64              `json:"tls_tcp_gbps"`
		TCPGBps     float64              `json:"tcp_gbps"`
		QUICOverTLS float64              `json:"quic_over_tls_tcp"`
		Samples     map[string][]float64 `json:"samples_gbps"`
		CPUPerGB    map[string]float64   `json:"cpu_seconds_per_gb"`
		Unit        string               `json:"unit"`
		Op          string               `json:"op"`
		BlockBytes  int                  `json:"block_bytes"`
		Blocks      int                  `json:"blocks"`
		Inflight    int                  `json:"inflight"`
		Conns       int                  `json:"conns"`
	}{
		QUICGBps: median(samples["quic"]), TLSTCPGBps: median(samples["tls_tcp"]), TCPGBps: median(samples["tcp"]),
		Samples: samples, Unit: "GB/s (1e9 bytes per second), median of the samples",
		CPUPerGB: map[string]float64{"quic": median(cpu["quic"]), "tls_tcp": median(cpu["tls_tcp"]), "tcp": median(cpu["tcp"])},
		Op:       *op, BlockBytes: *blockSize, Blocks: blocks, Inflight: *inflight, Conns: *conns,
	}
	if res.TLSTCPGBps > 0 {
		res.QUICOverTLS = res.QUICGBps / res.TLSTCPGBps
	}
	if *asJSON {
		return printJSON(res)
	}
	fmt.Printf("%d × %d-byte %ss over loopback, %d in flight over %d connections (median of %d rounds):\n",
		blocks, *blockSize, *op, *inflight, *conns, *rounds)
	fmt.Printf("  kvmesh QUIC   %6.2f GB/s  %5.2f CPU-s/GB  (%.2f × TLS/TCP)\n", res.QUICGBps, res.CPUPerGB["quic"], res.QUICOverTLS)
	fmt.Printf("  TLS 1.3 / TCP %6.2f GB/s  %5.2f CPU-s/GB\n", res.TLSTCPGBps, res.CPUPerGB["tls_tcp"])
	fmt.Printf("  plain TCP     %6.2f GB/s  %5.2f CPU-s/GB\n", res.TCPGBps, res.CPUPerGB["tcp"])
	fmt.Println("  (both ends run in this process: CPU is the sender's and the receiver's together)")
	return nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSetup is what every transport's measurement shares.
type benchSetup struct {
	get      bool   // gets (the server sends blocks) rather than puts
	block    []byte // the block every request moves
	sum      uint32 // its crc32c, as a store keeps it
	inflight int
	conns    int
}

// quic starts a server and a client endpoint and returns a function that
// moves n blocks, inflight requests at a time, over the client's pool of
// conns connections — exactly the calls agent/mesh makes.
func (b *benchSetup) quic(serverID, clientID *tlsca.Identity) (func(n int) error, func(), error) {
	cfg := transport.Local()
	cfg.Bind = "127.0.0.1:0"
	cfg.ConnsPerPeer = b.conns
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server, err := transport.Listen(cfg, serverID)
	if err != nil {
		return nil, nil, err
	}
	client, err := transport.Listen(cfg, clientID)
	if err != nil {
		server.Close()
		return nil, nil, err
	}
	server.Handle(opBenchGet, transport.HandlerFunc(func(ctx context.Context, req *transport.Request, w *transport.ResponseWriter) {
		w.Send(frame.StatusOK, transport.Payload{R: bytes.NewReader(b.block), Len: uint64(len(b.block)), CRC: b.sum})
	}))
	buffers := sync.Pool{New: func() any { return make([]byte, len(b.block)) }}
	server.Handle(opBenchPut, transport.HandlerFunc(func(ctx context.Context, req *transport.Request, w *transport.ResponseWriter) {
		buf := buffers.Get().([]byte)
		defer buffers.Put(buf)
		if req.Body.Remaining() > uint64(len(buf)) {
			w.Error(frame.ErrTooLarge)
			return
		}
		if err := req.Body.Fill(buf[:req.Body.Remaining()]); err != nil {
			w.Error(err)
			return
		}
		w.Send(frame.StatusOK, transport.Payload{})
	}))
	// The pool grows to conns connections in the background, one dial at
	// a time: give it the calls and the time to dial them all before
	// anything is measured.
	for range 4 * b.conns {
		resp, err := client.Do(context.Background(), server.Advertise(), transport.Call{Op: opBenchGet})
		if err != nil {
			return nil, nil, err
		}
		resp.Close()
		time.Sleep(20 * time.Millisecond)
	}
	run := func(n int) error {
		return parallel(n, b.inflight, func() func() error {
			dst := make([]byte, len(b.block))
			return func() error {
				call := transport.Call{Op: opBenchGet}
				if !b.get {
					call = transport.Call{Op: opBenchPut, Body: transport.Payload{R: bytes.NewReader(b.block), Len: uint64(len(b.block)), CRC: b.sum}}
				}
				resp, err := client.Do(context.Background(), server.Advertise(), call)
				if err != nil {
					return err
				}
				defer resp.Close()
				if !b.get {
					return nil
				}
				if resp.Length != uint64(len(dst)) {
					return fmt.Errorf("got a block of %d bytes, want %d", resp.Length, len(dst))
				}
				return resp.Fill(dst) // verifies the crc32c
			}
		})
	}
	return run, func() { client.Close(); server.Close() }, nil
}

// parallel runs n jobs on workers goroutines, each job made by the
// worker's own newJob (so each worker owns its buffers), and returns the
// first error.
func parallel(n, workers int, newJob func() func() error) error {
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		job := newJob()
		wg.Go(func() {
			for range work {
				if err := job(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// tcp moves n blocks over conns TCP connections (TLS 1.3 with the same
// mutual authentication when secure), inflight requests at a time: TCP has
// one byte stream per connection, so requests on one connection are
// pipelined and answered in order. Frames are the QUIC transport's.
func (b *benchSetup) tcp(serverID, clientID *tlsca.Identity, secure bool, n int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	roots := x509.NewCertPool()
	roots.AddCert(serverID.CA)
	served := make(chan error, b.conns)
	go func() {
		for range b.conns {
			c, err := ln.Accept()
			if err != nil {
				served <- err
				continue
			}
			if secure {
				c = tls.Server(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverID.Cert},
					ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots})
			}
			go func() {
				defer c.Close()
				served <- b.serveTCP(c)
			}()
		}
	}()

	// Requests in flight per connection: inflight spread over conns.
	depth := func(i int) int { return b.inflight/b.conns + btoi(i < b.inflight%b.conns) }
	// Blocks per connection: n spread over conns, each connection fed from
	// one queue so a slow connection does fewer.
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	errs := make(chan error, 2*b.conns)
	var wg sync.WaitGroup
	for i := range b.conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		if secure {
			tc := tls.Client(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{clientID.Cert},
				RootCAs: roots, ServerName: "bench-server"})
			if err := tc.Handshake(); err != nil {
				c.Close()
				return err
			}
			c = tc
		}
		wg.Go(func() {
			defer c.Close()
			errs <- b.clientTCP(c, depth(i), work)
		})
	}
	wg.Wait()
	for range b.conns {
		if err := <-served; err != nil {
			return err
		}
	}
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// clientTCP sends requests on c, keeping up to depth unanswered, while
// work lasts, and reads and verifies the answers in order.
func (b *benchSetup) clientTCP(c net.Conn, depth int, work <-chan struct{}) error {
	tokens := make(chan struct{}, depth)
	sent := make(chan struct{}, depth) // one per request written
	werr := make(chan error, 1)
	go func() {
		defer close(sent)
		req := frame.Header{Code: uint8(opBenchGet)}
		if !b.get {
			req = frame.Header{Code: uint8(opBenchPut), Length: uint64(len(b.block)), Checksum: b.sum}
		}
		hdr, _ := req.Append(nil)
		for range work {
			tokens <- struct{}{}
			if _, err := c.Write(hdr); err != nil {
				werr <- err
				return
			}
			if !b.get {
				if _, err := c.Write(b.block); err != nil {
					werr <- err
					return
				}
			}
			sent <- struct{}{}
		}
		werr <- nil
	}()
	dst := make([]byte, len(b.block))
	for range sent {
		h, err := frame.ReadHeader(c, uint64(len(dst)))
		if err != nil {
			return err
		}
		if b.get {
			if err := frame.NewBody(io.LimitReader(c, int64(h.Length)), h.Length, h.Checksum).Fill(dst[:h.Length]); err != nil {
				return err
			}
		}
		<-tokens
	}
	if err := <-werr; err != nil {
		return err
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serveTCP answers framed requests on c until the client closes: a get
// with the block, a put, once read and verified, with an acknowledgement.
func (b *benchSetup) serveTCP(c net.Conn) error {
	buf := make([]byte, len(b.block))
	ack, _ := frame.Header{Code: uint8(frame.StatusOK)}.Append(nil)
	resp, _ := frame.Header{Code: uint8(frame.StatusOK), Length: uint64(len(b.block)), Checksum: b.sum}.Append(nil)
	for {
		h, err := frame.ReadHeader(c, uint64(len(buf)))
		if errors.Is(err, frame.ErrBadFrame) && errors.Is(err, io.EOF) {
			return nil // the client is done
		}
		if err != nil {
			return err
		}
		if frame.Opcode(h.Code) == opBenchGet {
			if _, err := c.Write(resp); err != nil {
				return err
			}
			if _, err := c.Write(b.block); err != nil {
				return err
			}
			continue
		}
		if err := frame.NewBody(io.LimitReader(c, int64(h.Length)), h.Length, h.Checksum).Fill(buf[:h.Length]); err != nil {
			return err
		}
		if _, err := c.Write(ack); err != nil {
			return err
		}
	}
}
