package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/policy/replay"
)

// replayReport is what `kvmesh replay --json` prints.
type replayReport struct {
	Policy             string  `json:"policy"`
	Admission          string  `json:"admission,omitempty"`
	Trace              string  `json:"trace"`
	CapacityTokens     int64   `json:"capacity_tokens"`
	DiskCapacityTokens int64   `json:"disk_capacity_tokens,omitempty"`
	BlockTokens        int     `json:"block_tokens"`
	Requests           int64   `json:"requests"`
	Blocks             int64   `json:"blocks"`
	HitRate            float64 `json:"hit_rate"`
	MemoryHitRate      float64 `json:"memory_hit_rate"`
	DiskHitRate        float64 `json:"disk_hit_rate,omitempty"`
	LRUHitRate         float64 `json:"lru_hit_rate"`
	BeladyHitRate      float64 `json:"belady_hit_rate"`
	BlocksWrittenDisk  int64   `json:"blocks_written_disk"`
	LRUBlocksWritten   int64   `json:"lru_blocks_written_disk,omitempty"`
	NsPerEvent         float64 `json:"ns_per_event"`
	// Fallback says why a wasm module was taken out of service during the
	// replay: its figures are then partly the native policy's.
	Fallback string `json:"fallback,omitempty"`
}

func runReplay(args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	tracePath := fs.String("trace", "", "request trace, Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids)")
	capacity := fs.Int64("capacity-tokens", 0, "memory tier capacity in tokens")
	diskCapacity := fs.Int64("disk-capacity-tokens", 0, "disk tier capacity in tokens (0: memory only)")
	blockTokens := fs.Int("block-tokens", 512, "tokens per block of the trace")
	evictName := fs.String("policy", "lru", "eviction policy: lru (native), a shipped policy's name, or FILE.wasm")
	admitName := fs.String("admission", "write-back", "admission policy (two tiers): write-back, write-through, memory-only (native), a shipped policy's name, or FILE.wasm")
	dir := fs.String("policy-dir", defaultPolicyDir(), "where shipped policies are found by name")
	asJSON := fs.Bool("json", false, "print one JSON object")
	plot := fs.String("plot", "", "also replay at 1/4 to 4 times the capacity and draw hit rate against capacity to this SVG file")
	signals := fs.Bool("signals", false, "instead of replaying, measure how predictable reuse is: how often a request's prefix is sent again, and how well each signal an online policy sees (AUC) tells those requests apart")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *tracePath == "":
		return errors.New("--trace is required")
	case *blockTokens <= 0:
		return errors.New("--block-tokens must be > 0")
	case *signals:
		var others []string
		fs.Visit(func(f *flag.Flag) {
			if !slices.Contains([]string{"signals", "trace", "block-tokens", "json"}, f.Name) {
				others = append(others, "--"+f.Name)
			}
		})
		if len(others) > 0 {
			return fmt.Errorf("--signals replays nothing, so %s would be ignored; it takes --trace, --block-tokens and --json", strings.Join(others, ", "))
		}
		trace, err := replay.LoadTrace(*tracePath)
		if err != nil {
			return err
		}
		rep := replay.Signals(trace, *blockTokens)
		if *asJSON {
			return printJSON(rep)
		}
		printSignals(os.Stdout, rep)
		return nil
	case *capacity <= 0:
		return errors.New("--capacity-tokens must be > 0")
	case *diskCapacity < 0:
		return errors.New("--disk-capacity-tokens must be >= 0")
	}
	trace, err := replay.LoadTrace(*tracePath)
	if err != nil {
		return err
	}
	ctx := context.Background()
	loader, err := newPolicyLoader(ctx, *dir)
	if err != nil {
		return err
	}
	defer loader.close(ctx)
	evict, err := loader.eviction(ctx, *evictName)
	if err != nil {
		return err
	}
	admit, err := loader.admission(ctx, *admitName)
	if err != nil {
		return err
	}

	bar := newProgress(os.Stderr)
	run := func(label string, capacity, disk int64, e evictionFactory) (replay.Result, error) {
		cfg := replay.Config{CapacityTokens: capacity, DiskCapacityTokens: disk, BlockTokens: *blockTokens, Eviction: e.make, Progress: bar.reporter(label)}
		if disk > 0 {
			cfg.Admission = admit.make
		}
		res, err := replay.Run(trace, cfg)
		bar.done()
		return res, err
	}
	lru := evictionFactory{name: "lru", make: func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }}
	res, err := run(evict.name, *capacity, *diskCapacity, evict)
	if err != nil {
		return err
	}
	fallback := errors.Join(evict.failures(), admit.failures())
	base, err := run("lru", *capacity, *diskCapacity, lru)
	if err != nil {
		return err
	}
	belady := replay.Belady(trace, *capacity+*diskCapacity, *blockTokens)

	rep := replayReport{
		Policy: evict.name, Trace: *tracePath, CapacityTokens: *capacity, DiskCapacityTokens: *diskCapacity, BlockTokens: *blockTokens,
		Requests: res.Requests, Blocks: res.Blocks, HitRate: res.HitRate(), MemoryHitRate: float64(res.MemoryHits) / float64(res.Blocks),
		LRUHitRate: base.HitRate(), BeladyHitRate: belady.HitRate(), BlocksWrittenDisk: res.BlocksWrittenDisk, NsPerEvent: res.NsPerEvent(),
	}
	if *diskCapacity > 0 {
		rep.Admission = admit.name
		rep.DiskHitRate = float64(res.DiskHits) / float64(res.Blocks)
		rep.LRUBlocksWritten = base.BlocksWrittenDisk
	}
	if fallback != nil {
		rep.Fallback = fallback.Error()
	}

	if *plot != "" {
		if err := plotCapacities(*plot, trace, *capacity, *diskCapacity, *blockTokens, run, evict, lru); err != nil {
			return err
		}
	}
	if *asJSON {
		return printJSON(rep)
	}
	printReplay(os.Stdout, rep)
	return nil
}

func printReplay(w io.Writer, r replayReport) {
	fmt.Fprintf(w, "trace %s: %d requests, %d blocks of %d tokens\n", r.Trace, r.Requests, r.Blocks, r.BlockTokens)
	if r.DiskCapacityTokens > 0 {
		fmt.Fprintf(w, "memory %d tokens, disk %d tokens, admission %s\n", r.CapacityTokens, r.DiskCapacityTokens, r.Admission)
	} else {
		fmt.Fprintf(w, "memory %d tokens\n", r.CapacityTokens)
	}
	fmt.Fprintf(w, "%-14s hit rate %.4f", r.Policy, r.HitRate)
	if r.DiskCapacityTokens > 0 {
		fmt.Fprintf(w, " (memory %.4f, disk %.4f), %d blocks written to disk", r.MemoryHitRate, r.DiskHitRate, r.BlocksWrittenDisk)
	}
	fmt.Fprintf(w, ", %.0f ns per event\n", r.NsPerEvent)
	fmt.Fprintf(w, "%-14s hit rate %.4f", "lru", r.LRUHitRate)
	if r.DiskCapacityTokens > 0 {
		fmt.Fprintf(w, ", %d blocks written to disk", r.LRUBlocksWritten)
	}
	fmt.Fprintf(w, "\n%-14s hit rate %.4f\n", "belady", r.BeladyHitRate)
	if r.Fallback != "" {
		fmt.Fprintf(w, "warning: a module fell back to the native policy during the replay: %s\n", r.Fallback)
	}
}

func printSignals(w io.Writer, r replay.SignalReport) {
	share := func(k, n int) float64 { return float64(k) / float64(max(n, 1)) }
	fmt.Fprintf(w, "%d requests of 3+ blocks; prefix sent again: first turns %d of %d (%.3f), later turns %d of %d (%.3f)\n",
		r.Requests, r.ContinuedFirst, r.FirstTurns, share(r.ContinuedFirst, r.FirstTurns), r.ContinuedLater, r.LaterTurns, share(r.ContinuedLater, r.LaterTurns))
	fmt.Fprintf(w, "by earlier turns (0..%d+):", len(r.ContinuedByTurn)-1)
	for _, c := range r.ContinuedByTurn {
		fmt.Fprintf(w, " %.2f", c)
	}
	fmt.Fprintf(w, "\nAUC (0.5: no information)   all  first turns  later turns\n")
	aucText := func(a float64) string {
		if a < 0 {
			return "-" // no pair of a continued and an abandoned request
		}
		return fmt.Sprintf("%.3f", a)
	}
	for _, s := range r.Signals {
		fmt.Fprintf(w, "%-24s %7s %12s %12s\n", s.Name, aucText(s.AUC), aucText(s.AUCFirstTurns), aucText(s.AUCLaterTurns))
	}
	fmt.Fprintf(w, "block accesses asked for again, by online class (new blocks × uses × partial, in-sample): AUC %s; first accesses %s\n",
		aucText(r.BlockClassAUC), aucText(r.BlockClassAUCFirst))
}

// plotCapacities replays at 1/4, 1/2, 1, 2 and 4 times the capacity (both
// tiers scaled alike) and draws the three policies' hit rates.
func plotCapacities(path string, trace []replay.Request, capacity, disk int64, blockTokens int,
	run func(string, int64, int64, evictionFactory) (replay.Result, error), evict, lru evictionFactory) error {
	factors := []float64{0.25, 0.5, 1, 2, 4}
	caps := make([]int64, len(factors))
	series := []replay.Series{{Name: evict.name}, {Name: "lru"}, {Name: "belady"}}
	for i, f := range factors {
		caps[i] = int64(float64(capacity) * f)
		d := int64(float64(disk) * f)
		for j, e := range []evictionFactory{evict, lru} {
			res, err := run(fmt.Sprintf("%s ×%g", e.name, f), caps[i], d, e)
			if err != nil {
				return err
			}
			series[j].HitRates = append(series[j].HitRates, res.HitRate())
		}
		series[2].HitRates = append(series[2].HitRates, replay.Belady(trace, caps[i]+d, blockTokens).HitRate())
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	title := "hit rate against memory capacity"
	if disk > 0 {
		title = fmt.Sprintf("hit rate against capacity (disk %g× memory)", float64(disk)/float64(capacity))
	}
	if err := replay.WritePlot(f, title, caps, series); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// defaultPolicyDir is where make puts the shipped policies.
func defaultPolicyDir() string {
	if d := os.Getenv("KVMESH_POLICY_DIR"); d != "" {
		return d
	}
	return filepath.Join("build", "policies")
}

// policyLoader turns policy names and files into factories, compiling wasm
// modules once.
type policyLoader struct {
	dir string
	rt  *policy.Runtime
}

func newPolicyLoader(ctx context.Context, dir string) (*policyLoader, error) {
	cache := ""
	if d, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(d, "kvmesh", "wazero")
	}
	rt, err := policy.NewRuntime(ctx, cache, policy.Limits{})
	if err != nil {
		return nil, err
	}
	return &policyLoader{dir: dir, rt: rt}, nil
}

func (l *policyLoader) close(ctx context.Context) { l.rt.Close(ctx) }

type evictionFactory struct {
	name     string
	make     func(policy.Tier) (policy.Eviction, error)
	failures func() error
}

type admissionFactory struct {
	name     string
	make     func() (policy.Admission, error)
	failures func() error
}

func noFailures() error { return nil }

// module compiles a policy named by file (a path, or ending in .wasm) or
// by the name of a shipped policy.
func (l *policyLoader) module(ctx context.Context, name string) (*policy.Module, string, error) {
	path := name
	if !strings.HasSuffix(name, ".wasm") && !strings.ContainsRune(name, os.PathSeparator) {
		path = filepath.Join(l.dir, name+".wasm")
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("policy %q: %w (shipped policies are built by make policies into %s)", name, err, l.dir)
	}
	m, err := l.rt.Compile(ctx, wasm)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return m, strings.TrimSuffix(filepath.Base(path), ".wasm") + ".wasm", nil
}

func (l *policyLoader) eviction(ctx context.Context, name string) (evictionFactory, error) {
	if name == "lru" {
		return evictionFactory{name: "lru", make: func(policy.Tier) (policy.Eviction, error) { return policy.NewLRU(), nil }, failures: noFailures}, nil
	}
	m, label, err := l.module(ctx, name)
	if err != nil {
		return evictionFactory{}, err
	}
	if !m.Implements(policy.SlotEviction) {
		return evictionFactory{}, fmt.Errorf("%s does not implement the eviction slot", label)
	}
	var mine []interface{ Err() error }
	return evictionFactory{name: label, make: func(t policy.Tier) (policy.Eviction, error) {
		w, err := m.NewEviction(ctx, t, policy.BindConfig{})
		if err == nil {
			mine = append(mine, w)
		}
		return w, err
	}, failures: func() error { return firstFailure(mine) }}, nil
}

func (l *policyLoader) admission(ctx context.Context, name string) (admissionFactory, error) {
	native := map[string]policy.Admission{
		"write-back":    policy.WriteBack{},
		"write-through": writeAll{policy.DiskNow},
		"memory-only":   writeAll{policy.DiskNever},
	}
	if a, ok := native[name]; ok {
		return admissionFactory{name: name, make: func() (policy.Admission, error) { return a, nil }, failures: noFailures}, nil
	}
	m, label, err := l.module(ctx, name)
	if err != nil {
		return admissionFactory{}, err
	}
	if !m.Implements(policy.SlotAdmission) {
		return admissionFactory{}, fmt.Errorf("%s does not implement the admission slot", label)
	}
	var mine []interface{ Err() error }
	return admissionFactory{name: label, make: func() (policy.Admission, error) {
		w, err := m.NewAdmission(ctx, policy.BindConfig{})
		if err == nil {
			mine = append(mine, w)
		}
		return w, err
	}, failures: func() error { return firstFailure(mine) }}, nil
}

func firstFailure(bindings []interface{ Err() error }) error {
	for _, b := range bindings {
		if err := b.Err(); err != nil {
			return err
		}
	}
	return nil
}

// writeAll gives every new block the same disk decision.
type writeAll struct{ disk policy.DiskWrite }

func (w writeAll) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for range inserts {
		dst = append(dst, policy.Decision{Disk: w.disk})
	}
	return dst
}

// progress draws a one-line progress bar on a terminal, and nothing
// otherwise.
type progress struct {
	w    io.Writer
	tty  bool
	last time.Time
}

func newProgress(f *os.File) *progress {
	st, err := f.Stat()
	return &progress{w: f, tty: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) reporter(label string) func(done, total int) {
	if !p.tty {
		return nil
	}
	return func(done, total int) {
		if time.Since(p.last) < 100*time.Millisecond && done < total {
			return
		}
		p.last = time.Now()
		const width = 40
		filled := width * done / total
		fmt.Fprintf(p.w, "\r%-16s [%s%s] %3d%%", label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*done/total)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
