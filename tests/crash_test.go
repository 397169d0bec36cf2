package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

func randomBlock(r *rand.Rand) []byte {
	b := make([]byte, 1+r.IntN(256<<10))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Blocks acknowledged with disk durability survive kill -9 byte-exact, and
// a write cut off by the crash is either whole or absent, never torn.
func TestKill9LosesNoAcknowledgedBlock(t *testing.T) {
	t.Parallel()
	a := startAgent(t, t.TempDir(), "--mem-capacity", "16MiB", "--disk-capacity", "1GiB")
	c := a.client()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	acked := map[string][]byte{}
	for i := 0; i < 200; i++ {
		key, v := fmt.Sprintf("block-%03d", i), randomBlock(r)
		if err := c.Put(ctx, "", []byte(key), v, kvmeshv1.Durability_DURABILITY_DISK); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		acked[key] = v
	}

	// A further stream from several writers, killed mid-flight.
	var mu sync.Mutex
	inFlight := map[string][]byte{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key, v := fmt.Sprintf("stream-%d-%05d", w, i), randomBlock(r)
				mu.Lock()
				inFlight[key] = v
				mu.Unlock()
				if err := c.Put(ctx, "", []byte(key), v, kvmeshv1.Durability_DURABILITY_DISK); err != nil {
					return // the agent died under us
				}
				mu.Lock()
				acked[key] = v
				delete(inFlight, key)
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	a.kill()
	close(stop)
	wg.Wait()
	streamAcked := len(acked) - 200
	if streamAcked == 0 {
		t.Fatal("no write of the stream was acknowledged before the kill; the test proves nothing")
	}

	a.restart()
	c2 := a.client()
	for key, want := range acked {
		got, err := c2.Get(ctx, "", []byte(key))
		if err != nil {
			t.Fatalf("acknowledged block %s lost: %v", key, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("acknowledged block %s: %d bytes read differ from the %d written", key, len(got), len(want))
		}
	}
	for key, want := range inFlight {
		got, err := c2.Get(ctx, "", []byte(key))
		var ke *client.KeyError
		if errors.As(err, &ke) && ke.Code == client.NotFound {
			continue
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("block %s cut off by the crash was served torn: %v", key, err)
		}
	}
	st, err := c2.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.CorruptDropped != 0 {
		t.Fatalf("%d corrupt blocks after a process crash", st.CorruptDropped)
	}
	t.Logf("%d blocks acknowledged (%d in the killed stream), %d in flight at the kill", len(acked), streamAcked, len(inFlight))
}

// The agent exits cleanly on SIGTERM, removing its socket, and a second
// agent on a live socket is refused with a clear message.
func TestSigtermAndSocketInUse(t *testing.T) {
	t.Parallel()
	a := startAgent(t, t.TempDir(), "--mem-capacity", "8MiB", "--disk-capacity", "0")
	second := exec.Command(kvmeshBin, "agent", "--data-dir", t.TempDir(), "--socket", a.socket, "--admin-addr", "")
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by a live agent") {
		t.Fatalf("second agent on a live socket: %v\n%s", err, out)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.exited:
		if err != nil {
			t.Fatalf("agent exit after SIGTERM: %v\n%s", err, a.log)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent ignored SIGTERM")
	}
	if !strings.Contains(a.log.String(), "stopped") {
		t.Fatalf("no clean-stop log line:\n%s", a.log)
	}
}
