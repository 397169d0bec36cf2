package cuda

import (
	"errors"
	"testing"

	"github.com/kvmesh/kvmesh/gpu/layout"
)

// TestUnavailableIsReported holds in every build: without -tags cuda, or
// with it on a machine with no driver or GPU, constructors say
// ErrUnavailable (the agent's cue for host-only mode) instead of failing
// some other way.
func TestUnavailableIsReported(t *testing.T) {
	t.Parallel()
	l := layout.Layout{Layers: 1, Blocks: 2, Heads: 1, BlockTokens: 1, HeadDim: 8, ElemBytes: 2}
	tests := []struct {
		name string
		open func() (*Cache, error)
	}{
		{"allocate", func() (*Cache, error) { return NewDeviceCache(0, l) }},
		{"open IPC", func() (*Cache, error) { return OpenIPC(0, l, make([]IPCRegion, len(l.Regions()))) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := tc.open()
			if err == nil {
				c.Close()
				t.Skip("a CUDA device is present: device_test.go covers it")
			}
			if tc.name == "open IPC" && !errors.Is(err, ErrUnavailable) {
				// On a GPU machine zeroed handles must fail to open, cleanly.
				t.Logf("zero handles refused: %v", err)
				return
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
		})
	}
}
