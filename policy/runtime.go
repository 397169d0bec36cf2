package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Limits bound what a policy module may use. The zero value of a field
// means its default.
type Limits struct {
	// MemoryPages caps a module's linear memory, in 64 KiB pages
	// (default 1024: 64 MiB).
	MemoryPages uint32
	// CallTimeout is the deadline of every export call (default 25ms). It
	// is enforced as a budget of fuel, FuelPerSecond per second of it: a
	// call that spends its budget traps at the next function or loop start
	// (see meter.go).
	// Unlike a clock, fuel keeps replays deterministic and cannot fail a
	// sound module because the host was busy. Since code that is slow for
	// its fuel (loads that miss every cache) could still run long, a call
	// that returns after more than WallClockGrace times its deadline on
	// the clock takes the module out of service too.
	CallTimeout time.Duration
	// InitTimeout is the deadline of _initialize, which runs the guest
	// language's start-up, and of the calls made to validate a module
	// (default 2s).
	InitTimeout time.Duration
	// BatchEvents is how many event records one call carries; the guest's
	// exchange buffer holds this many (default 1024).
	BatchEvents int
}

func (l Limits) withDefaults() Limits {
	if l.MemoryPages == 0 {
		l.MemoryPages = 1024
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = 25 * time.Millisecond
	}
	if l.InitTimeout <= 0 {
		l.InitTimeout = 2 * time.Second
	}
	if l.BatchEvents <= 0 {
		l.BatchEvents = 1024
	}
	return l
}

// FuelPerSecond converts deadlines into fuel: about what Go-built guests
// spend in a second on a server core (an instruction that does work costs
// one unit, moving values between locals and the stack nothing).
const FuelPerSecond = 4_000_000_000

// WallClockGrace is how many times its deadline a call may take on the
// clock before the module is taken out of service. Fuel is the deadline;
// the clock is only a backstop against code that is slow for its fuel, so
// the grace is wide: a loaded 2-core host was measured stalling single
// sound calls for 100–300 ms, which a grace of 4 turned into fallbacks.
const WallClockGrace = 40

func budget(d time.Duration) int64 { return int64(d.Seconds() * FuelPerSecond) }

// Runtime compiles and runs policy modules in wazero's sandbox: no
// filesystem, network, environment or clock beyond what the ABI gives,
// bounded memory and a deadline on every call.
type Runtime struct {
	wz     wazero.Runtime
	cache  wazero.CompilationCache
	limits Limits
}

// NewRuntime returns a runtime whose compiled code is cached under
// cacheDir ("" keeps the cache in memory only), so a module the agent has
// seen before compiles in milliseconds.
func NewRuntime(ctx context.Context, cacheDir string, limits Limits) (*Runtime, error) {
	limits = limits.withDefaults()
	var cache wazero.CompilationCache
	if cacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			return nil, fmt.Errorf("policy compilation cache: %w", err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	// Guests are stopped by the fuel meter adds, not by
	// WithCloseOnContextDone (see meter.go).
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithMemoryLimitPages(limits.MemoryPages)
	wz := wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := instantiateSandboxImports(ctx, wz); err != nil {
		wz.Close(ctx)
		cache.Close(ctx)
		return nil, err
	}
	return &Runtime{wz: wz, cache: cache, limits: limits}, nil
}

// Close releases every module and instance of the runtime.
func (r *Runtime) Close(ctx context.Context) error {
	err := r.wz.Close(ctx)
	return errors.Join(err, r.cache.Close(ctx))
}

// Module is a compiled, validated policy module. Each binding to a slot
// owns an instance of its own (instances are not safe for concurrent use
// and hold the policy's state); the module keeps a small pool of
// initialised instances that are not bound yet.
type Module struct {
	rt       *Runtime
	compiled wazero.CompiledModule
	digest   string
	slots    map[Slot]bool

	mu    sync.Mutex
	spare []*instance
}

// Compile compiles and validates a policy module: it must be WebAssembly,
// import nothing but the sandbox's functions, export a memory, the ABI
// functions with the ABI's signatures and at least one slot, report ABI
// version 1 and hand out an exchange buffer inside its memory.
func (r *Runtime) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly module (no \\0asm header)")
	}
	metered, err := meter(wasm)
	if err == nil {
		var compiled wazero.CompiledModule
		if compiled, err = r.wz.CompileModule(ctx, metered); err == nil {
			return r.validate(ctx, wasm, compiled)
		}
	}
	// Explain with wazero's own words what is wrong with the module as
	// uploaded, if anything.
	compiled, cerr := r.wz.CompileModule(ctx, wasm)
	if cerr != nil {
		return nil, fmt.Errorf("not a valid WebAssembly module: %w", cerr)
	}
	compiled.Close(ctx)
	return nil, fmt.Errorf("cannot meter module: %w", err)
}

func (r *Runtime) validate(ctx context.Context, wasm []byte, compiled wazero.CompiledModule) (*Module, error) {
	sum := sha256.Sum256(wasm)
	m := &Module{rt: r, compiled: compiled, digest: hex.EncodeToString(sum[:]), slots: map[Slot]bool{}}
	if err := m.checkInterface(); err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	in, err := m.instantiate(ctx)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m.spare = append(m.spare, in)
	return m, nil
}

// Digest is the hex SHA-256 of the module's bytes, its content address.
func (m *Module) Digest() string { return m.digest }

// Implements reports whether the module exports the functions of slot s.
func (m *Module) Implements(s Slot) bool { return m.slots[s] }

// Slots lists the slots the module implements.
func (m *Module) Slots() []Slot {
	var out []Slot
	for _, s := range []Slot{SlotAdmission, SlotEviction, SlotPrefetch} {
		if m.slots[s] {
			out = append(out, s)
		}
	}
	return out
}

// Close releases the compiled code and the pooled instances; bindings
// already made keep working until they are closed themselves.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	spare := m.spare
	m.spare = nil
	m.mu.Unlock()
	for _, in := range spare {
		in.close(ctx)
	}
	return m.compiled.Close(ctx)
}

// acquire hands out an initialised instance that no one else uses.
func (m *Module) acquire(ctx context.Context) (*instance, error) {
	m.mu.Lock()
	if n := len(m.spare); n > 0 {
		in := m.spare[n-1]
		m.spare = m.spare[:n-1]
		m.mu.Unlock()
		return in, nil
	}
	m.mu.Unlock()
	return m.instantiate(ctx)
}

// abiFunc is an ABI export's signature.
type abiFunc struct {
	params, results []api.ValueType
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64

	requiredExports = map[string]abiFunc{
		exportABIVersion: {nil, []api.ValueType{i32}},
		exportBuffer:     {[]api.ValueType{i32}, []api.ValueType{i32}},
	}
	optionalExports = map[string]abiFunc{
		exportObserve:    {[]api.ValueType{i32}, []api.ValueType{i32}},
		exportVictims:    {[]api.ValueType{i32}, []api.ValueType{i32}},
		exportAdmit:      {[]api.ValueType{i32}, []api.ValueType{i32}},
		exportPrefetch:   {[]api.ValueType{i32}, []api.ValueType{i32}},
		exportTelemetry:  {[]api.ValueType{i32}, []api.ValueType{i32}},
		exportInitialize: {nil, nil},
	}
)

func (m *Module) checkInterface() error {
	var problems []string
	for _, f := range m.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		want, ok := sandboxImports[mod+"."+name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("imports %s.%s, which the policy sandbox does not provide%s", mod, name, importHint(mod)))
		case !sameSignature(f, want):
			problems = append(problems, fmt.Sprintf("imports %s.%s with signature %s, the sandbox's is %s", mod, name, signature(f.ParamTypes(), f.ResultTypes()), signature(want.params, want.results)))
		}
	}
	for _, mem := range m.compiled.ImportedMemories() {
		mod, name, _ := mem.Import()
		problems = append(problems, fmt.Sprintf("imports memory %s.%s; a policy must define its own", mod, name))
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New("module " + strings.Join(problems, "; "))
	}

	exports := m.compiled.ExportedFunctions()
	check := func(name string, want abiFunc) bool {
		f, ok := exports[name]
		if !ok {
			return false
		}
		if !sameSignature(f, want) {
			problems = append(problems, fmt.Sprintf("export %s has signature %s, ABI v%d says %s", name, signature(f.ParamTypes(), f.ResultTypes()), ABIVersion, signature(want.params, want.results)))
			return false
		}
		return true
	}
	for name, want := range requiredExports {
		if _, ok := exports[name]; !ok {
			problems = append(problems, fmt.Sprintf("does not export %s (not a kvmesh policy module, see docs/policy-abi.md)", name))
			continue
		}
		check(name, want)
	}
	has := map[string]bool{}
	for name, want := range optionalExports {
		has[name] = check(name, want)
	}
	if _, ok := m.compiled.ExportedMemories()[exportMemory]; !ok {
		problems = append(problems, `does not export its memory as "memory"`)
	}
	m.slots[SlotAdmission] = has[exportAdmit]
	m.slots[SlotPrefetch] = has[exportPrefetch]
	m.slots[SlotEviction] = has[exportObserve] && has[exportVictims]
	if has[exportObserve] != has[exportVictims] {
		problems = append(problems, "exports only one of kvmesh_observe and kvmesh_victims; eviction needs both")
	}
	if len(problems) == 0 && len(m.Slots()) == 0 {
		problems = append(problems, "implements no slot (export kvmesh_admit, kvmesh_observe+kvmesh_victims or kvmesh_prefetch)")
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New("module " + strings.Join(problems, "; "))
	}
	return nil
}

func importHint(module string) string {
	if module == wasiModule {
		return " (no filesystem, sockets or processes; see docs/policy-abi.md for the stubs it has)"
	}
	return ""
}

func sameSignature(f api.FunctionDefinition, want abiFunc) bool {
	return slices.Equal(f.ParamTypes(), want.params) && slices.Equal(f.ResultTypes(), want.results)
}

func signature(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ",") + ")"
	}
	return name(params) + "->" + name(results)
}
