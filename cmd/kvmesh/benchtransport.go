package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// opBenchPut is the opcode benchTransport's server answers: it reads and
// verifies the payload, and acknowledges.
const opBenchPut frame.Opcode = 0x80

// benchTransport moves the same bytes, in the same frames, between two
// endpoints on loopback three ways — kvmesh's QUIC transport, TLS 1.3 over
// TCP, plain TCP — so the figures compare transports, not framing. Every
// receiver verifies each block's crc32c.
func benchTransport(args []string) error {
	fs := flag.NewFlagSet("bench transport", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	total := fs.Int64("total", 1<<30, "bytes per measurement")
	blockSize := fs.Int("block-size", 4<<20, "bytes per block (one request)")
	streams := fs.Int("streams", 4, "QUIC requests in flight at once")
	conns := fs.Int("conns", transport.LAN().ConnsPerPeer, "QUIC connections per peer")
	rounds := fs.Int("rounds", 3, "measurements of each transport, interleaved; the median is reported")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *blockSize < 1 || *total < int64(*blockSize) || *streams < 1 || *conns < 1 || *rounds < 1 {
		return errors.New("bench transport: sizes, --streams, --conns and --rounds must be positive, --total at least one block")
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

	quicRun, closeQUIC, err := quicBench(serverID, clientID, *conns, *streams, block)
	if err != nil {
		return err
	}
	defer closeQUIC()
	runs := []struct {
		name string
		run  func(blocks int) error
	}{
		{"quic", quicRun},
		{"tls_tcp", func(n int) error { return tcpBench(serverID, clientID, true, block, n) }},
		{"tcp", func(n int) error { return tcpBench(serverID, clientID, false, block, n) }},
	}
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
		xs = slices.Sorted(slices.Values(xs))
		return xs[len(xs)/2]
	}
	res := struct {
		QUICGBps     float64              `json:"quic_gbps"`
		TLSTCPGBps   float64              `json:"tls_tcp_gbps"`
		TCPGBps      float64              `json:"tcp_gbps"`
		QUICOverTLS  float64              `json:"quic_over_tls_tcp"`
		Samples      map[string][]float64 `json:"samples_gbps"`
		CPUPerGB     map[string]float64   `json:"cpu_seconds_per_gb"`
		Unit         string               `json:"unit"`
		BlockBytes   int                  `json:"block_bytes"`
		Blocks       int                  `json:"blocks"`
		Streams      int                  `json:"quic_streams"`
		ConnsPerPeer int                  `json:"quic_conns_per_peer"`
	}{
		QUICGBps: median(samples["quic"]), TLSTCPGBps: median(samples["tls_tcp"]), TCPGBps: median(samples["tcp"]),
		Samples: samples, Unit: "GB/s (1e9 bytes per second), median of the samples",
		CPUPerGB:   map[string]float64{"quic": median(cpu["quic"]), "tls_tcp": median(cpu["tls_tcp"]), "tcp": median(cpu["tcp"])},
		BlockBytes: *blockSize, Blocks: blocks, Streams: *streams, ConnsPerPeer: *conns,
	}
	res.QUICOverTLS = res.QUICGBps / res.TLSTCPGBps
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("%d × %d-byte blocks over loopback (median of %d rounds):\n", blocks, *blockSize, *rounds)
	fmt.Printf("  kvmesh QUIC   %6.2f GB/s  %5.2f CPU-s/GB  (%d streams over %d connections; %.2f × TLS/TCP)\n", res.QUICGBps, res.CPUPerGB["quic"], *streams, *conns, res.QUICOverTLS)
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

// quicBench starts a server and a client endpoint and returns a function
// that sends n blocks from client to server, streams at a time.
func quicBench(serverID, clientID *tlsca.Identity, conns, streams int, block []byte) (func(n int) error, func(), error) {
	cfg := transport.Local()
	cfg.Bind = "127.0.0.1:0"
	cfg.ConnsPerPeer = conns
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
	buffers := sync.Pool{New: func() any { return make([]byte, len(block)) }}
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
	sum := frame.Checksum(block)
	run := func(n int) error {
		work := make(chan struct{}, n)
		for range n {
			work <- struct{}{}
		}
		close(work)
		errs := make(chan error, streams)
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				for range work {
					resp, err := client.Do(context.Background(), server.Advertise(), transport.Call{
						Op:   opBenchPut,
						Body: transport.Payload{R: bytes.NewReader(block), Len: uint64(len(block)), CRC: sum},
					})
					if err != nil {
						errs <- err
						return
					}
					resp.Close()
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	return run, func() { client.Close(); server.Close() }, nil
}

// tcpBench sends n blocks over one TCP connection (TLS 1.3 with the same
// mutual authentication when secure), each framed as on QUIC and answered
// with a response header once the receiver verified it.
func tcpBench(serverID, clientID *tlsca.Identity, secure bool, block []byte, n int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	roots := x509.NewCertPool()
	roots.AddCert(serverID.CA)
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		if secure {
			c = tls.Server(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverID.Cert},
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots})
		}
		served <- receiveBlocks(c, len(block))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	if secure {
		c = tls.Client(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{clientID.Cert},
			RootCAs: roots, ServerName: "bench-server"})
	}
	hdr, _ := frame.Header{Code: uint8(opBenchPut), Length: uint64(len(block)), Checksum: frame.Checksum(block)}.Append(nil)
	for range n {
		if _, err := c.Write(hdr); err != nil {
			return err
		}
		if _, err := c.Write(block); err != nil {
			return err
		}
		if _, err := frame.ReadHeader(c, 0); err != nil {
			return err
		}
	}
	c.Close()
	return <-served
}

// receiveBlocks reads framed blocks until the sender closes, verifying each
// checksum and acknowledging each block.
func receiveBlocks(c net.Conn, maxLen int) error {
	buf := make([]byte, maxLen)
	ack, _ := frame.Header{Code: uint8(frame.StatusOK)}.Append(nil)
	for {
		h, err := frame.ReadHeader(c, uint64(maxLen))
		if errors.Is(err, frame.ErrBadFrame) && errors.Is(err, io.EOF) {
			return nil // the sender is done
		}
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf[:h.Length]); err != nil {
			return err
		}
		if crc32.Checksum(buf[:h.Length], frame.Castagnoli) != h.Checksum {
			return frame.ErrChecksum
		}
		if _, err := c.Write(ack); err != nil {
			return err
		}
	}
}
