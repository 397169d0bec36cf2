// Package agent is the kvmesh node daemon: it owns the block store, serves
// the local API on a Unix socket and the admin API (health, metrics) over
// HTTP, and shuts all of it down cleanly.
package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvmesh/kvmesh/agent/keys"
	"github.com/kvmesh/kvmesh/agent/store"
)

// Config is everything an agent is started with. DefaultConfig gives the
// embedded defaults that `kvmesh agent` runs on with no flags.
type Config struct {
	DataDir      string   // block files, policies, the lock file
	Socket       string   // Unix socket of the local gRPC API
	AdminAddr    string   // HTTP listener for /healthz, /metrics and /v1/policies; "" disables it
	AdminToken   string   // bearer token for policy uploads; "" refuses them
	MemCapacity  uint64   // bytes of the memory tier
	DiskCapacity uint64   // bytes of the disk tier; 0 disables it
	MaxBlockSize uint64   // largest block accepted
	Namespaces   []string // namespaces served; requests for others are refused
	Version      string   // reported by Stat
	Logger       *slog.Logger

	// MempoolSocket is where engines register host pools (memfds) for the
	// pool ops; "" puts it beside Socket, as mempool.sock.
	MempoolSocket string

	// Cluster mode is on when TLSDir or Dev is set (see ClusterMode);
	// otherwise the fields below must stay unset and the agent is a
	// single node.
	TLSDir    string   // ca.crt, node.crt, node.key from `kvmesh tls`
	Dev       bool     // a throwaway dev CA; logged loudly
	Bind      string   // UDP address of the mesh endpoint; "" is DefaultBind
	Advertise string   // host:port peers use; "" is the bound address
	Join      []string // seeds, host:port
	Replicas  int      // owners per key (R); 1 when zero
	NodeName  string   // member name: the certificate's CN; under Dev, "" is the hostname
	// GossipProfile picks the gossip timings: "lan" (or "") for
	// memberlist's data-centre defaults, "local" for the aggressive ones
	// of members on one machine or in one test (gossip.Local).
	GossipProfile string
}

// DefaultConfig is a single-node agent with 1 GiB of memory and 8 GiB of
// disk under the user's state directory.
func DefaultConfig() Config {
	return Config{
		DataDir:      DefaultDataDir(),
		Socket:       DefaultSocket(),
		AdminAddr:    "127.0.0.1:7070",
		MemCapacity:  1 << 30,
		DiskCapacity: 8 << 30,
		MaxBlockSize: store.DefaultMaxBlockSize,
		Namespaces:   []string{keys.DefaultNamespace},
		Version:      "dev",
		Replicas:     1,
	}
}

// DefaultDataDir is $XDG_STATE_HOME/kvmesh, else ~/.local/state/kvmesh.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "kvmesh")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "kvmesh")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("kvmesh-%d", os.Getuid()), "state")
}

// DefaultSocket is $XDG_RUNTIME_DIR/kvmesh/agent.sock, else
// /tmp/kvmesh-UID/agent.sock: short enough for a Unix socket path, and
// the same for the agent and the tools that talk to it.
func DefaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "kvmesh", "agent.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("kvmesh-%d", os.Getuid()), "agent.sock")
}

// MempoolPath is the mempool socket's path: MempoolSocket, else
// mempool.sock in Socket's directory.
func (c Config) MempoolPath() string {
	if c.MempoolSocket != "" {
		return c.MempoolSocket
	}
	return filepath.Join(filepath.Dir(c.Socket), "mempool.sock")
}

// Size is a byte count written with an optional binary or decimal unit:
// 4096, 512MiB, 1GiB, 10GB. It implements flag.Value.
type Size uint64

var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize reads a Size.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, optionally with a unit such as MiB or GB", s)
	}
	v := n * float64(mult)
	if v >= 1<<64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return uint64(v), nil
}

func (z *Size) Set(s string) error {
	n, err := ParseSize(s)
	*z = Size(n)
	return err
}

func (z Size) String() string {
	for _, u := range sizeUnits[:4] {
		if z != 0 && uint64(z)%u.mult == 0 && uint64(z)/u.mult < 1024 {
			return strconv.FormatUint(uint64(z)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatUint(uint64(z), 10)
}
