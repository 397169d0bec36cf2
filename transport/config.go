package transport

import (
	"errors"
	"log/slog"
	"time"
)

// Config sets up an Endpoint. Start from a preset (LAN or Local) and
// override fields; a zero field is an error, not a default.
type Config struct {
	// Bind is the UDP address the endpoint listens and dials from, e.g.
	// "0.0.0.0:7946". Port 0 picks a free port.
	Bind string
	// Advertise is the host:port peers use to reach this endpoint; empty
	// means the bound address (which must then not be unspecified for
	// peers to use it, see Endpoint.Advertise).
	Advertise string

	// ConnsPerPeer is how many QUIC connections the pool keeps per peer.
	// Requests spread over them; more than one lets two cores encrypt and
	// decrypt at once, since quic-go runs each connection on one goroutine.
	ConnsPerPeer int

	// StreamWindow is the flow-control window of one stream: a whole
	// block (typically 0.5–8 MiB) fits, so a sender never stalls waiting
	// for window updates mid-block.
	StreamWindow uint64
	// ConnWindow is the window of a whole connection (LAN: four 8 MiB
	// blocks in flight); it bounds the unread bytes one peer can make us
	// buffer. Larger windows measured no faster on loopback.
	ConnWindow uint64
	// MaxPayload bounds the payload of a request or response we accept.
	MaxPayload uint64
	// MaxStreams is the number of concurrent requests a peer may have
	// open on one connection.
	MaxStreams int64

	// RequestTimeout is the deadline of a request whose context has none,
	// covering dial, send and the whole response.
	RequestTimeout time.Duration
	// ServeTimeout is the deadline for serving one incoming request, from
	// its first byte to our last; a peer that stalls mid-stream longer
	// loses the request.
	ServeTimeout time.Duration
	// DialTimeout bounds a QUIC handshake.
	DialTimeout time.Duration
	// IdleTimeout closes a connection that has heard nothing for this
	// long; KeepAlive pings well inside it keep pooled connections alive.
	IdleTimeout time.Duration
	KeepAlive   time.Duration

	// Logger receives one line per refused connection or request.
	Logger *slog.Logger
}

// LAN is the preset for agents on a data-centre network.
func LAN() Config {
	return Config{
		Bind:           "0.0.0.0:7946",
		ConnsPerPeer:   2,
		StreamWindow:   8 << 20,
		ConnWindow:     32 << 20,
		MaxPayload:     64 << 20,
		MaxStreams:     256,
		RequestTimeout: 30 * time.Second,
		ServeTimeout:   30 * time.Second,
		DialTimeout:    5 * time.Second,
		IdleTimeout:    30 * time.Second,
		KeepAlive:      10 * time.Second,
		Logger:         slog.Default(),
	}
}

// Local is the preset for endpoints on loopback (tests, benchmarks): the
// same windows, deadlines short enough that a stalled peer fails a test in
// about a second.
func Local() Config {
	c := LAN()
	c.Bind = "127.0.0.1:0"
	c.RequestTimeout = 5 * time.Second
	c.ServeTimeout = 5 * time.Second
	c.DialTimeout = time.Second
	c.IdleTimeout = 5 * time.Second
	c.KeepAlive = time.Second
	return c
}

func (c *Config) validate() error {
	switch {
	case c.Bind == "":
		return errors.New("transport: Config.Bind is empty")
	case c.ConnsPerPeer < 1:
		return errors.New("transport: Config.ConnsPerPeer must be at least 1")
	case c.StreamWindow == 0 || c.ConnWindow < c.StreamWindow:
		return errors.New("transport: Config.StreamWindow must be set and at most ConnWindow")
	case c.MaxPayload == 0 || c.MaxStreams < 1:
		return errors.New("transport: Config.MaxPayload and MaxStreams must be set")
	case c.RequestTimeout <= 0 || c.ServeTimeout <= 0 || c.DialTimeout <= 0:
		return errors.New("transport: Config timeouts must be positive")
	case c.IdleTimeout <= 0 || c.KeepAlive <= 0 || c.KeepAlive >= c.IdleTimeout:
		return errors.New("transport: Config.KeepAlive must be positive and below IdleTimeout")
	case c.Logger == nil:
		return errors.New("transport: Config.Logger is nil")
	}
	return nil
}
