package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/kvmesh/kvmesh/agent/localapi"
	"github.com/kvmesh/kvmesh/agent/mempool"
	"github.com/kvmesh/kvmesh/agent/mesh"
	"github.com/kvmesh/kvmesh/agent/store"
	"github.com/kvmesh/kvmesh/gpu"
	"github.com/kvmesh/kvmesh/policy"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
	"github.com/kvmesh/kvmesh/proto/sglang/runtime/hicache"
)

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	lock     *os.File
	store    *store.Store
	mesh     *mesh.Node // nil in single-node mode
	grpc     *grpc.Server
	sock     net.Listener
	pools    *mempool.Registry
	mempool  *mempool.Server
	admin    *http.Server
	adminLn  net.Listener
	mux      *http.ServeMux
	registry *prometheus.Registry
	gpus     *gpu.Node
	policies *policy.Manager
	stop     chan struct{} // closed by Close: background loops end
	wg       sync.WaitGroup
}

// Start opens the data directory and the store, then serves the local and
// admin APIs until Close. Every failure names what to fix.
func Start(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), registry: prometheus.NewRegistry(), stop: make(chan struct{})}
	if err := a.start(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (a *Agent) start() error {
	cfg := a.cfg
	if err := cfg.checkCluster(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return err
	}
	a.lock = lock
	a.store, err = store.New(store.Config{
		MemCapacity:  cfg.MemCapacity,
		DiskCapacity: cfg.DiskCapacity,
		DiskDir:      filepath.Join(cfg.DataDir, "blocks"),
		MaxBlockSize: cfg.MaxBlockSize,
		Namespaces:   cfg.Namespaces,
		Logger:       a.log,
	})
	if err != nil {
		return err
	}
	a.gpus = gpu.Discover(nvml.New(), a.log) // host-only, said once, without a driver
	// Policies before the mesh, so the mesh shares them from its first
	// gossip on.
	telemetry := &policy.TelemetryFeed{}
	a.policies, err = policy.NewManager(context.Background(), policy.ManagerConfig{
		Dir: filepath.Join(cfg.DataDir, "policies"), Token: cfg.AdminToken, Slots: a.store, Logger: a.log, Telemetry: telemetry})
	if err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.feedTelemetry(telemetry, a.stop)
	}()
	a.registry.MustRegister(a.policies.Metrics(), a.policies.ClusterMetrics())
	if cfg.ClusterMode() {
		if err := a.startMesh(); err != nil {
			return err
		}
	}
	a.sock, err = listenUnix(cfg.Socket)
	if err != nil {
		return err
	}
	m := newMetrics(a.store)
	a.registry.MustRegister(m, a.gpus, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	msgLimit := int(min(cfg.MaxBlockSize*4+(1<<20), 1<<31-1))
	a.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(msgLimit), grpc.MaxSendMsgSize(msgLimit),
		grpc.ChainUnaryInterceptor(m.observeOp))
	mpLn, err := listenUnix(cfg.MempoolPath())
	if err != nil {
		return fmt.Errorf("mempool socket: %w", err)
	}
	a.pools = mempool.NewRegistry()
	a.mempool = mempool.Serve(mpLn.(*net.UnixListener), a.pools, a.log)
	kvmeshv1.RegisterStoreServer(a.grpc, a.storeServer())
	hicache.RegisterStorageServerServer(a.grpc, localapi.NewHiCache(a.backend(), a.pools))
	kvmeshv1.RegisterKVCacheServer(a.grpc, localapi.NewKVCache(a.backend(), a.pools))
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.grpc.Serve(a.sock); err != nil {
			a.log.Error("local API stopped", "err", err)
		}
	}()

	a.mux.Handle("/v1/policies", a.policies.Handler())
	a.mux.Handle("/v1/policies/", a.policies.Handler())
	if cfg.AdminToken == "" {
		a.log.Info("no --admin-token: policy uploads are refused")
	}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	if cfg.AdminAddr != "" {
		if a.adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			return fmt.Errorf("admin listener %s: %w", cfg.AdminAddr, err)
		}
		a.admin = &http.Server{Handler: a.mux, ReadHeaderTimeout: 10 * time.Second}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := a.admin.Serve(a.adminLn); !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("admin API stopped", "err", err)
			}
		}()
	}
	st := a.store.Stat()
	a.log.Info("kvmesh agent serving", "socket", cfg.Socket, "mempool_socket", cfg.MempoolPath(), "admin", a.AdminAddr(), "data_dir", cfg.DataDir,
		"memory", Size(cfg.MemCapacity).String(), "disk", Size(cfg.DiskCapacity).String(),
		"namespaces", cfg.Namespaces, "blocks", st.Blocks)
	return nil
}

// Store is the agent's block store.
func (a *Agent) Store() *store.Store { return a.store }

// AdminMux is the admin HTTP API's router, for features that add routes.
func (a *Agent) AdminMux() *http.ServeMux { return a.mux }

// Registry is where the agent's Prometheus metrics are registered.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// AdminAddr is the admin listener's address ("" when disabled).
func (a *Agent) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Close stops serving, waits for requests in flight, and closes the store.
func (a *Agent) Close() error {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	if a.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a.admin.Shutdown(ctx)
		cancel()
	}
	if a.grpc != nil {
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			a.grpc.Stop()
		}
	} else if a.sock != nil {
		a.sock.Close()
	}
	a.wg.Wait()
	if a.mempool != nil { // after gRPC: no request uses a pool any more
		a.mempool.Close()
		os.Remove(a.cfg.MempoolPath())
	}
	var err error
	if a.mesh != nil { // after the local API: hand-off reads a quiet store
		if lerr := a.mesh.Leave(leaveTimeout); lerr != nil {
			a.log.Warn("left the mesh with errors", "err", lerr)
		}
	}
	if a.policies != nil { // slots back on native policies before the store goes
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a.policies.Close(ctx)
		cancel()
	}
	if a.store != nil {
		err = a.store.Close()
	}
	if a.sock != nil {
		os.Remove(a.cfg.Socket)
	}
	if a.gpus != nil {
		a.gpus.Close()
	}
	if a.lock != nil {
		a.lock.Close()
	}
	return err
}

// lockDir takes an exclusive lock on the data directory, so two agents can
// never share one.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another agent (flock: %v)", dir, err)
	}
	return f, nil
}

// listenUnix binds the local API socket. A socket file left by a dead agent
// is replaced; one a live agent answers on is an error.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by a live agent; stop it or pick another --socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}
