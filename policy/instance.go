package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one instantiation of a policy module with its exchange
// buffer. It is not safe for concurrent use.
type instance struct {
	mod     api.Module
	mem     api.Memory
	fuel    api.MutableGlobal // see meter.go
	buf     uint32            // address of the exchange buffer
	records int               // event records the buffer holds
	fn      map[string]api.Function
	stack   [1]uint64
	state   *guestState
	ctx     context.Context // carries state to the sandbox's functions
	limit   time.Duration
	pages   uint32 // memory limit, in pages
}

// bufferBytes is the size of the exchange buffer.
func (in *instance) bufferBytes() uint32 { return uint32(in.records * eventRecordSize) }

func (m *Module) instantiate(ctx context.Context) (*instance, error) {
	limits := m.rt.limits
	st := newGuestState()
	in := &instance{
		state:   st,
		ctx:     context.WithValue(context.WithoutCancel(ctx), guestStateKey{}, st),
		limit:   limits.CallTimeout,
		pages:   limits.MemoryPages,
		records: limits.BatchEvents,
		fn:      map[string]api.Function{},
	}
	fail := func(err error) (*instance, error) {
		in.close(ctx)
		return nil, err
	}
	mod, err := m.rt.wz.InstantiateModule(in.ctx, m.compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return fail(fmt.Errorf("instantiating module: %w", err))
	}
	in.mod = mod
	in.mem = mod.ExportedMemory(exportMemory)
	in.fuel = mod.ExportedGlobal(fuelExport).(api.MutableGlobal)
	for name := range optionalExports {
		if f := mod.ExportedFunction(name); f != nil {
			in.fn[name] = f
		}
	}
	if f := in.fn[exportInitialize]; f != nil {
		if _, err := in.callTimed(f, 0, limits.InitTimeout); err != nil {
			return fail(fmt.Errorf("%s: %w", exportInitialize, err))
		}
	}
	version, err := in.callTimed(mod.ExportedFunction(exportABIVersion), 0, limits.InitTimeout)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", exportABIVersion, err))
	}
	if version != ABIVersion {
		return fail(fmt.Errorf("module speaks ABI version %d, this agent speaks %d", version, ABIVersion))
	}
	addr, err := in.callTimed(mod.ExportedFunction(exportBuffer), int32(in.records), limits.InitTimeout)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", exportBuffer, err))
	}
	in.buf = uint32(addr)
	if addr <= 0 || addr%8 != 0 || uint64(in.buf)+uint64(in.bufferBytes()) > uint64(in.mem.Size()) {
		return fail(fmt.Errorf("%s(%d) returned address %d: want a non-zero, 8-byte aligned buffer of %d bytes inside the module's %d bytes of memory",
			exportBuffer, in.records, addr, in.bufferBytes(), in.mem.Size()))
	}
	return in, nil
}

// call runs an ABI export under the call deadline.
func (in *instance) call(name string, arg int32) (int32, error) {
	return in.callTimed(in.fn[name], arg, in.limit)
}

func (in *instance) callTimed(f api.Function, arg int32, limit time.Duration) (int32, error) {
	in.stack[0] = api.EncodeI32(arg)
	in.fuel.Set(uint64(budget(limit)))
	start := time.Now()
	if err := f.CallWithStack(in.ctx, in.stack[:]); err != nil {
		return 0, in.explain(err, limit)
	}
	if took := time.Since(start); took > WallClockGrace*limit {
		return 0, &callError{reasonDeadline, fmt.Errorf("call took %v, more than %d times its %v deadline", took.Round(time.Millisecond), WallClockGrace, limit)}
	}
	return api.DecodeI32(in.stack[0]), nil
}

// buffer is a view of the exchange buffer; it must be taken again after
// every call, since the guest may have grown (and so moved) its memory.
func (in *instance) buffer() []byte {
	b, _ := in.mem.Read(in.buf, in.bufferBytes())
	return b
}

func (in *instance) close(ctx context.Context) {
	if in.mod != nil {
		_ = in.mod.Close(ctx)
	}
}

// Failure reasons, as counted in metrics.
const (
	reasonTrap     = "trap"     // the guest trapped or exited
	reasonDeadline = "deadline" // a call spent its fuel or overran its deadline on the clock
	reasonMemory   = "memory"   // the guest ran out of its memory pages
	reasonAnswer   = "answer"   // the guest answered nonsense
)

// callError is why a module was taken out of service.
type callError struct {
	reason string
	err    error
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

func failureReason(err error) string {
	var ce *callError
	if errors.As(err, &ce) {
		return ce.reason
	}
	return reasonTrap
}

// explain turns a wazero error into a callError with what the guest
// printed last.
func (in *instance) explain(err error, limit time.Duration) error {
	if int64(in.fuel.Get()) < 0 {
		return &callError{reasonDeadline, fmt.Errorf("call overran its %v deadline (spent its %d units of fuel)", limit, budget(limit))}
	}
	out := strings.TrimSpace(string(in.state.stderr))
	reason := reasonTrap
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("guest exited with code %d", exit.ExitCode())
	}
	if strings.Contains(out, "out of memory") || in.mem.Size() >= in.pages*65536 {
		reason = reasonMemory
		err = fmt.Errorf("guest ran out of memory (%d pages): %w", in.pages, err)
	}
	if out != "" {
		// The head of the output carries the panic message.
		if len(out) > 512 {
			out = out[:512] + "…"
		}
		err = fmt.Errorf("%w; guest output: %s", err, out)
	}
	return &callError{reason, err}
}
