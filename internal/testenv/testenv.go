// Package testenv finds what the policy tests need outside their package:
// the shipped wasm policies (in $KVMESH_POLICY_DIR when make has built them
// there, otherwise built once per test binary) and the shared traces.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// PolicyPath returns the path of wasm-policies/NAME as a built module.
func PolicyPath(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("KVMESH_POLICY_DIR"); d != "" {
		p := filepath.Join(d, name+".wasm")
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("KVMESH_POLICY_DIR is set but has no %s.wasm: %v (run make policies)", name, err)
		}
		return p
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "kvmesh-test-policies-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	p := filepath.Join(dir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", p, "github.com/kvmesh/kvmesh/wasm-policies/"+name)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building policy %s: %v\n%s", name, err, out)
	}
	built[name] = p
	return p
}

// ReadPolicy returns the bytes of wasm-policies/NAME as a built module.
func ReadPolicy(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(PolicyPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// CacheDir is a compilation cache shared by test runs, so each module is
// compiled once rather than once per test.
func CacheDir() string { return filepath.Join(os.TempDir(), "kvmesh-test-wazero-cache") }

// Cleanup removes the modules built by PolicyPath; call it from TestMain.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// Trace returns the path of a trace in the shared directory that sits
// beside the repository (<repo>/../shared/traces/NAME); traces are never
// copied into the repository.
func Trace(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", "traces", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("trace %s (the shared directory belongs beside the repository): %v", name, err)
	}
	return p
}
