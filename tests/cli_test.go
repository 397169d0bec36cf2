package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The CLI a person uses: put a file, get it back, see it in stat, and a
// clear exit 1 on a miss.
func TestCLIPutGetStat(t *testing.T) {
	t.Parallel()
	a := startAgent(t, t.TempDir(), "--mem-capacity", "8MiB", "--disk-capacity", "64MiB")
	file := filepath.Join(t.TempDir(), "in")
	data := []byte(strings.Repeat("kv-block ", 5000))
	os.WriteFile(file, data, 0o644)

	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(kvmeshBin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	if _, errOut, err := run("put", "--socket", a.socket, "--durability", "disk", "my/key", file); err != nil {
		t.Fatalf("put: %v %s", err, errOut)
	}
	out, errOut, err := run("get", "--socket", a.socket, "my/key")
	if err != nil || out != string(data) {
		t.Fatalf("get: %v %s (%d bytes)", err, errOut, len(out))
	}
	_, errOut, err = run("get", "--socket", a.socket, "absent")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(errOut, `"absent" not found`) {
		t.Fatalf("get of a missing key: %v, stderr %q", err, errOut)
	}
	_, errOut, err = run("put", "--socket", a.socket, strings.Repeat("k", 600), file)
	if err == nil || !strings.Contains(errOut, "512") {
		t.Fatalf("put with a 600-byte key: %v, stderr %q", err, errOut)
	}
	out, _, err = run("stat", "--socket", a.socket, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Blocks uint64 `json:"blocks"`
		Tiers  []struct {
			Tier   string `json:"tier"`
			Blocks uint64 `json:"blocks"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stat --json: %v\n%s", err, out)
	}
	if st.Blocks != 1 || len(st.Tiers) != 2 || st.Tiers[1].Blocks != 1 {
		t.Fatalf("stat: %+v", st)
	}
	out, _, err = run("stat", "--socket", a.socket)
	if err != nil || !strings.Contains(out, "memory") || !strings.Contains(out, "disk") {
		t.Fatalf("stat: %v\n%s", err, out)
	}
	_, errOut, err = run("get", "--socket", filepath.Join(t.TempDir(), "none.sock"), "k")
	if err == nil || !strings.Contains(errOut, "is `kvmesh agent` running") {
		t.Fatalf("get with no agent: %v %q", err, errOut)
	}
}
