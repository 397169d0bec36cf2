package gossip

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
)

// MinRetransmitMult is the lowest RetransmitMult a Config may use. Measured
// on loopback: with memberlist's DefaultLocalConfig (2), 8 nodes joining
// through one seed took 16–27 s to converge; with 4, 0.2 s.
const MinRetransmitMult = 4

// Config tunes the gossip protocol (SWIM, as memberlist implements it).
// Start from a preset, LAN or Local, and override fields.
type Config struct {
	// ProbeInterval is how often a member probes a random other one;
	// ProbeTimeout how long it waits for the ack before asking others to
	// probe it too. IndirectChecks is how many others it asks.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	IndirectChecks int

	// GossipInterval is how often a member sends queued broadcasts to
	// GossipNodes random members; each broadcast is sent
	// RetransmitMult·log(N+1) times (at least MinRetransmitMult).
	GossipInterval time.Duration
	GossipNodes    int
	RetransmitMult int

	// A suspected member is declared dead after
	// SuspicionMult·log10(N)·ProbeInterval once enough others confirm the
	// suspicion, and after SuspicionMaxTimeoutMult times that at the
	// latest.
	SuspicionMult           int
	SuspicionMaxTimeoutMult int

	// PushPullInterval is how often a member syncs its full state with a
	// random other over a stream; StreamTimeout bounds one such sync (and
	// a join).
	PushPullInterval time.Duration
	StreamTimeout    time.Duration
	// GossipToTheDeadTime is how long members keep gossiping to a dead
	// one, so it can refute its death after a partition.
	GossipToTheDeadTime time.Duration

	// Logger receives memberlist's log, at its levels.
	Logger *slog.Logger
}

// LAN is the preset for a data-centre network: memberlist's
// DefaultLANConfig timings.
func LAN() Config {
	return Config{
		ProbeInterval:           time.Second,
		ProbeTimeout:            500 * time.Millisecond,
		IndirectChecks:          3,
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 6,
		PushPullInterval:        30 * time.Second,
		StreamTimeout:           10 * time.Second,
		GossipToTheDeadTime:     30 * time.Second,
		Logger:                  slog.Default(),
	}
}

// Local is the preset for members on one machine (tests, benchmarks, a
// playground): aggressive timings that converge in well under a second and
// declare a crashed member dead within about two.
func Local() Config {
	return Config{
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		IndirectChecks:          3,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             4,
		RetransmitMult:          4,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		// Gossip broadcasts of a join can run out of retransmits while
		// the seed still knows few members; a full sync every second
		// bounds how long any member can miss another.
		PushPullInterval:    time.Second,
		StreamTimeout:       2 * time.Second,
		GossipToTheDeadTime: 2 * time.Second,
		Logger:              slog.Default(),
	}
}

func (c Config) validate() error {
	switch {
	case c.RetransmitMult < MinRetransmitMult:
		return fmt.Errorf("gossip: RetransmitMult %d is below %d: broadcasts would take seconds to converge", c.RetransmitMult, MinRetransmitMult)
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("gossip: ProbeTimeout must be positive and below ProbeInterval")
	case c.GossipInterval <= 0 || c.GossipNodes < 1 || c.IndirectChecks < 1:
		return fmt.Errorf("gossip: GossipInterval, GossipNodes and IndirectChecks must be positive")
	case c.SuspicionMult < 1 || c.SuspicionMaxTimeoutMult < 1:
		return fmt.Errorf("gossip: SuspicionMult and SuspicionMaxTimeoutMult must be positive")
	case c.PushPullInterval <= 0 || c.StreamTimeout <= 0 || c.GossipToTheDeadTime <= 0:
		return fmt.Errorf("gossip: PushPullInterval, StreamTimeout and GossipToTheDeadTime must be positive")
	case c.Logger == nil:
		return fmt.Errorf("gossip: Config.Logger is nil")
	}
	return nil
}

// packetBudget is the largest gossip packet memberlist composes: it fits
// one QUIC datagram even at the smallest packet size QUIC allows (1280
// bytes less headers and AEAD tag), so gossip rarely needs a stream.
const packetBudget = 1200

// memberlistConfig maps c onto memberlist's configuration.
func (c Config) memberlistConfig(name string) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.IndirectChecks = c.IndirectChecks
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.RetransmitMult = c.RetransmitMult
	mc.SuspicionMult = c.SuspicionMult
	mc.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.StreamTimeout
	mc.GossipToTheDeadTime = c.GossipToTheDeadTime
	mc.UDPBufferSize = packetBudget
	mc.Logger = log.New(&levelWriter{log: c.Logger}, "", 0)
	return mc
}

// levelWriter turns memberlist's "[LEVEL] memberlist: text" lines into
// slog records at that level.
type levelWriter struct{ log *slog.Logger }

var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG] ", slog.LevelDebug},
	{"[INFO] ", slog.LevelInfo},
	{"[WARN] ", slog.LevelWarn},
	{"[ERR] ", slog.LevelError},
}

func (w *levelWriter) Write(p []byte) (int, error) {
	line := string(p)
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if len(line) >= len(l.prefix) && line[:len(l.prefix)] == l.prefix {
			level, line = l.level, line[len(l.prefix):]
			break
		}
	}
	if len(line) > 0 && line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
	}
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}
