package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
)

// benches lists every `kvmesh bench NAME` benchmark; each lives in its own
// file and prints its figures (one JSON object with --json).
var benches = map[string]func(args []string) error{
	"swap":      benchSwap,
	"transport": benchTransport,
	"cluster":   benchCluster,
	"policy":    benchPolicy,
}

func runBench(args []string) error {
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 {
		return fmt.Errorf("usage: kvmesh bench %s [--json]", strings.Join(names, "|"))
	}
	b, ok := benches[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (have: %s)", args[0], strings.Join(names, ", "))
	}
	return b(args[1:])
}

// startCPUProfile profiles the process into path until the returned stop is
// called; with no path it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
