package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

func testConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Socket = filepath.Join(dir, "agent.sock")
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.MemCapacity, cfg.DiskCapacity = 8<<20, 32<<20
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

func start(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestServesLocalAndAdminAPIs(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	a := start(t, cfg)
	c, err := client.Dial(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Put(ctx, "", []byte("k"), []byte("value"), kvmeshv1.Durability_DURABILITY_DISK); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "", []byte("k")); err != nil || string(v) != "value" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if _, err := c.Get(ctx, "", []byte("absent")); err == nil || err.(*client.KeyError).Code != client.NotFound {
		t.Fatalf("Get of a missing key: %v", err)
	}
	err = c.Put(ctx, "", make([]byte, 513), []byte("v"), kvmeshv1.Durability_DURABILITY_MEMORY)
	if ke, ok := err.(*client.KeyError); !ok || ke.Code != -2 || !strings.Contains(ke.Msg, "512") {
		t.Fatalf("Put with a 513-byte key: %v", err)
	}
	if _, err := c.Exist(ctx, "no-such-model", [][]byte{[]byte("k")}); err == nil || !strings.Contains(err.Error(), "no-such-model") {
		t.Fatalf("Exist in an unknown namespace: %v", err)
	}

	for path, want := range map[string]string{
		"/healthz": "ok",
		"/metrics": `kvmesh_tier_used_bytes{tier="disk"}`,
	} {
		resp, err := http.Get("http://" + a.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
		if path == "/metrics" && !strings.Contains(string(body), `kvmesh_op_duration_seconds_count{code="OK",op="Put"} 2`) {
			t.Fatalf("metrics lack the Put latency histogram:\n%s", body)
		}
	}
}

func TestStartRefusesWhatItCannotUse(t *testing.T) {
	t.Parallel()
	live := testConfig(t)
	start(t, live)

	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"socket held by a live agent", func(c *Config) { c.Socket = live.Socket }, "in use by a live agent"},
		{"data dir locked by another agent", func(c *Config) { c.DataDir = live.DataDir }, "in use by another agent"},
		{"data dir not writable", func(c *Config) {
			f := filepath.Join(t.TempDir(), "file")
			os.WriteFile(f, nil, 0o644)
			c.DataDir = filepath.Join(f, "data")
		}, "data dir"},
		{"bad namespace", func(c *Config) { c.Namespaces = []string{"has space"} }, "namespace"},
		{"admin address taken", func(c *Config) {
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			t.Cleanup(func() { ln.Close() })
			c.AdminAddr = ln.Addr().String()
		}, "admin listener"},
	}
	for _, tc := range tests {
		cfg := testConfig(t)
		tc.mutate(&cfg)
		a, err := Start(cfg)
		if err == nil {
			a.Close()
			t.Errorf("%s: started", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q lacks %q", tc.name, err, tc.want)
		}
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ln, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody answers: a crashed agent's socket
	start(t, cfg)
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"4096", 4096, true}, {"512MiB", 512 << 20, true}, {"1GiB", 1 << 30, true}, {"10GB", 10e9, true},
		{"1.5KiB", 1536, true}, {"2g", 2 << 30, true}, {"0", 0, true},
		{"", 0, false}, {"-1MiB", 0, false}, {"MiB", 0, false}, {"12XB", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v", tc.in, got, err)
		}
	}
	if s := Size(512 << 20).String(); s != "512MiB" {
		t.Errorf("Size(512MiB).String() = %q", s)
	}
}

// The policy admin API is mounted on the admin listener: listing is open,
// uploads without the configured bearer token are refused.
func TestPolicyAdminAPIIsMountedAndGuarded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AdminToken = "s3cret"
	a := start(t, cfg)
	base := "http://" + a.AdminAddr() + "/v1/policies"
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/policies: %d", resp.StatusCode)
	}
	for _, token := range []string{"", "wrong"} {
		req, _ := http.NewRequest("POST", base+"?slot=eviction&tier=memory", strings.NewReader("\x00asm"))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("upload with token %q: %d, want 401", token, resp.StatusCode)
		}
	}
}
