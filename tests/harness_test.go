// Package tests runs kvmesh agents as real processes: crash, restart and
// (later) multi-node tests that unit tests cannot reach.
package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/client"
)

// kvmeshBin is the binary under test: $KVMESH_BIN (set by `make test`), or
// one built for this run.
var kvmeshBin string

func TestMain(m *testing.M) {
	kvmeshBin = os.Getenv("KVMESH_BIN")
	if kvmeshBin == "" {
		dir, err := os.MkdirTemp("", "kvmesh-bin")
		if err != nil {
			panic(err)
		}
		kvmeshBin = filepath.Join(dir, "kvmesh")
		build := exec.Command("go", "build", "-o", kvmeshBin, "../cmd/kvmesh")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building kvmesh:", err)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// agentProc is one `kvmesh agent` process.
type agentProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	socket  string
	dataDir string
	args    []string
	wrap    []string // command the agent runs under (e.g. ip netns exec NS); none when empty
	log     *bytes.Buffer
	exited  chan error
}

// startAgent runs an agent on a fresh socket with the given data dir and
// extra flags, and waits until it answers.
func startAgent(t *testing.T, dataDir string, extra ...string) *agentProc {
	t.Helper()
	return startAgentUnder(t, nil, dataDir, extra...)
}

// startAgentUnder is startAgent with the agent run as an argument of wrap
// (e.g. ip netns exec NS), which must exec it in its place.
func startAgentUnder(t *testing.T, wrap []string, dataDir string, extra ...string) *agentProc {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent.sock")
	args := append([]string{"agent", "--data-dir", dataDir, "--socket", socket, "--admin-addr", ""}, extra...)
	p := &agentProc{t: t, socket: socket, dataDir: dataDir, args: args, wrap: wrap, log: &bytes.Buffer{}}
	p.start()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *agentProc) start() {
	p.t.Helper()
	argv := append(append(append([]string{}, p.wrap...), kvmeshBin), p.args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := client.Dial(p.socket); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = c.Stat(ctx)
			cancel()
			c.Close()
			if err == nil {
				return
			}
		}
		select {
		case err := <-p.exited:
			p.t.Fatalf("agent exited at start-up: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("agent did not answer within 20s\n%s", p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to go.
func (p *agentProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// restart starts the agent again on the same socket and data dir.
func (p *agentProc) restart() {
	p.t.Helper()
	p.start()
}

func (p *agentProc) client() *client.Client {
	p.t.Helper()
	c, err := client.Dial(p.socket)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { c.Close() })
	return c
}
