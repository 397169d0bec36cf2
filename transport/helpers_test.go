package transport

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// lastOctet hands each test endpoint its own loopback address, 127.0.0.x,
// as a cluster of machines would have.
var lastOctet atomic.Uint32

func loopbackIP() string {
	return fmt.Sprintf("127.0.0.%d", 2+lastOctet.Add(1)%250)
}

// logBuf collects an endpoint's log lines.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type testNode struct {
	*Endpoint
	log *logBuf
}

func newCA(t testing.TB, cluster string) *tlsca.CA {
	t.Helper()
	ca, err := tlsca.NewCA(cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// newNode starts an endpoint on a fresh loopback address with the Local
// preset, adjusted by tweak, closed when the test ends.
func newNode(t testing.TB, ca *tlsca.CA, name string, tweak func(*Config)) *testNode {
	t.Helper()
	ip := loopbackIP()
	id, err := ca.Issue(name, []net.IP{net.ParseIP(ip)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	cfg := Local()
	cfg.Bind = ip + ":0"
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if tweak != nil {
		tweak(&cfg)
	}
	e, err := Listen(cfg, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return &testNode{Endpoint: e, log: logs}
}

func (n *testNode) refused(side, reason string) float64 {
	var m dto.Metric
	n.m.refused.WithLabelValues(side, reason).Write(&m)
	return m.GetCounter().GetValue()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitRefused waits until n counted a refusal, and logged it.
func waitRefused(t testing.TB, n *testNode, side, reason string) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%s never refused %s/%s; log:\n%s", n.Name(), side, reason, n.log), func() bool {
		return n.refused(side, reason) > 0
	})
	if !strings.Contains(n.log.String(), "reason="+reason) {
		t.Fatalf("%s refused %s/%s without a log line; log:\n%s", n.Name(), side, reason, n.log)
	}
}
