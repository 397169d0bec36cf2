// Package cuda is the device half of kvmesh's layout-swap core: it moves KV
// blocks between an engine's layer-major cache in GPU memory (opened through
// CUDA IPC) and block-major slots of a pinned host staging buffer.
//
// The CUDA code (kvswap.cu) is built by `make cuda` into a static library
// that the files under build tag `cuda` link. Built without the tag, every
// constructor returns ErrUnavailable, so the agent compiles and runs
// host-only everywhere; with the tag and no driver or device, the same.
//
// A gather (save) runs a kernel that packs the requested blocks block-major
// into device scratch, then copies runs of contiguous slots to the pinned
// buffer, one DMA per run (one for the whole batch when the slots are
// contiguous). A scatter (load) is the reverse. Each Staging owns its pinned
// buffer, device scratch, stream and events and frees them in Close.
package cuda

import "errors"

// ErrUnavailable means there is no CUDA here: the binary was built without
// -tags cuda, or no driver or device answered. The agent then runs host-only.
var ErrUnavailable = errors.New("CUDA unavailable")

// ErrClosed is returned by operations on a closed Cache or Staging.
var ErrClosed = errors.New("cuda: closed")

// IPCHandle is a cudaIpcMemHandle_t as the engine exported it
// (cudaIpcGetMemHandle, or torch's storage._share_cuda_()): 64 opaque bytes.
type IPCHandle [64]byte

// IPCRegion locates one layout region in another process's device memory:
// the allocation's handle and the region's byte offset inside it (a caching
// allocator hands out tensors inside larger allocations, and one allocation
// may hold several regions).
type IPCRegion struct {
	Handle IPCHandle
	Offset uint64
}
