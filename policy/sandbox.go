package policy

import (
	"context"
	"encoding/binary"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// wasiModule is the WASI preview 1 namespace. Guests built with Go's
// wasip1 port import a handful of its functions from their runtime even
// when the policy itself never touches the system; the sandbox provides
// those as stubs that reveal nothing about the host.
const wasiModule = "wasi_snapshot_preview1"

// WASI errno values the stubs return.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoNosys   = 52
)

// sandboxImports is everything a policy module may import.
var sandboxImports = map[string]abiFunc{
	wasiModule + ".args_get":          {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	wasiModule + ".args_sizes_get":    {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	wasiModule + ".environ_get":       {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	wasiModule + ".environ_sizes_get": {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	wasiModule + ".clock_time_get":    {[]api.ValueType{i32, i64, i32}, []api.ValueType{i32}},
	wasiModule + ".fd_write":          {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
	wasiModule + ".random_get":        {[]api.ValueType{i32, i32}, []api.ValueType{i32}},
	wasiModule + ".poll_oneoff":       {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
	wasiModule + ".sched_yield":       {nil, []api.ValueType{i32}},
	wasiModule + ".proc_exit":         {[]api.ValueType{i32}, nil},
}

// hostCallFuel is what a call into the sandbox costs a guest, plus a
// sixteenth of the bytes it moves: its work must be paid for like the
// guest's own (see meter.go).
const hostCallFuel = 1000

// charge takes fuel from the calling guest.
func charge(mod api.Module, bytes uint32) {
	if g, ok := mod.ExportedGlobal(fuelExport).(api.MutableGlobal); ok {
		g.Set(uint64(int64(g.Get()) - hostCallFuel - int64(bytes/16)))
	}
}

// guestState is what the stubs know about one instance; it travels in the
// context of every call into that instance.
type guestState struct {
	clock  int64  // last time handed to the guest, unix ns
	now    int64  // time of the newest event the instance was given
	rng    uint64 // xorshift state for random_get: seeded, so replays repeat
	stderr []byte // tail of what the guest wrote to fds 1 and 2
}

type guestStateKey struct{}

// stderrTail bounds what is kept of a guest's output: enough for a Go
// panic message and the top of its trace.
const stderrTail = 2048

func newGuestState() *guestState { return &guestState{rng: 0x9E3779B97F4A7C15} }

func stateOf(ctx context.Context) *guestState {
	if st, ok := ctx.Value(guestStateKey{}).(*guestState); ok {
		return st
	}
	return newGuestState()
}

// tick returns the guest's clock: the newest event's time, forced to move
// forward by at least a nanosecond per reading so that guest runtimes
// waiting for time to pass do not spin forever.
func (st *guestState) tick() int64 {
	st.clock = max(st.clock+1, st.now)
	return st.clock
}

func (st *guestState) random() uint64 {
	st.rng ^= st.rng << 13
	st.rng ^= st.rng >> 7
	st.rng ^= st.rng << 17
	return st.rng
}

func (st *guestState) write(p []byte) {
	st.stderr = append(st.stderr, p...)
	if over := len(st.stderr) - stderrTail; over > 0 {
		st.stderr = append(st.stderr[:0], st.stderr[over:]...)
	}
}

func instantiateSandboxImports(ctx context.Context, wz wazero.Runtime) error {
	b := wz.NewHostModuleBuilder(wasiModule)
	export := func(name string, fn api.GoModuleFunc) {
		sig := sandboxImports[wasiModule+"."+name]
		b.NewFunctionBuilder().WithGoModuleFunction(fn, sig.params, sig.results).Export(name)
	}
	// No arguments and no environment.
	zeroSizes := func(_ context.Context, mod api.Module, stack []uint64) {
		if !mod.Memory().WriteUint32Le(api.DecodeU32(stack[0]), 0) || !mod.Memory().WriteUint32Le(api.DecodeU32(stack[1]), 0) {
			stack[0] = errnoFault
			return
		}
		stack[0] = errnoSuccess
	}
	nothing := func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoSuccess }
	export("args_sizes_get", zeroSizes)
	export("environ_sizes_get", zeroSizes)
	export("args_get", nothing)
	export("environ_get", nothing)
	export("sched_yield", nothing)
	export("clock_time_get", func(ctx context.Context, mod api.Module, stack []uint64) {
		if !mod.Memory().WriteUint64Le(api.DecodeU32(stack[2]), uint64(stateOf(ctx).tick())) {
			stack[0] = errnoFault
			return
		}
		stack[0] = errnoSuccess
	})
	export("random_get", func(ctx context.Context, mod api.Module, stack []uint64) {
		charge(mod, api.DecodeU32(stack[1]))
		buf, ok := mod.Memory().Read(api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
		if !ok {
			stack[0] = errnoFault
			return
		}
		st := stateOf(ctx)
		for len(buf) >= 8 {
			binary.LittleEndian.PutUint64(buf, st.random())
			buf = buf[8:]
		}
		for i := range buf {
			buf[i] = byte(st.random())
		}
		stack[0] = errnoSuccess
	})
	// Output to stdout and stderr is kept (the tail only) to explain a
	// failure; no other descriptor exists.
	export("fd_write", func(ctx context.Context, mod api.Module, stack []uint64) {
		fd, iovs, n, written := api.DecodeU32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2]), api.DecodeU32(stack[3])
		if fd != 1 && fd != 2 {
			stack[0] = errnoBadf
			return
		}
		mem := mod.Memory()
		st := stateOf(ctx)
		var total uint32
		for i := uint32(0); i < n; i++ {
			ptr, ok1 := mem.ReadUint32Le(iovs + 8*i)
			size, ok2 := mem.ReadUint32Le(iovs + 8*i + 4)
			data, ok3 := mem.Read(ptr, size)
			if !ok1 || !ok2 || !ok3 {
				stack[0] = errnoFault
				return
			}
			charge(mod, size)
			st.write(data)
			total += size
		}
		if !mem.WriteUint32Le(written, total) {
			stack[0] = errnoFault
			return
		}
		stack[0] = errnoSuccess
	})
	// A guest that wants to sleep or wait for I/O gets an error: a policy
	// has nothing to wait for.
	export("poll_oneoff", func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoNosys })
	export("proc_exit", func(ctx context.Context, mod api.Module, stack []uint64) {
		code := api.DecodeU32(stack[0])
		_ = mod.CloseWithExitCode(ctx, code)
		panic(sys.NewExitError(code))
	})
	_, err := b.Instantiate(ctx)
	return err
}
