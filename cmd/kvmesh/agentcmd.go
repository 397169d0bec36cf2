package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kvmesh/kvmesh/agent"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func runAgent(args []string) error {
	cfg := agent.DefaultConfig()
	cfg.Version = version
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for block files and state")
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "Unix socket of the local API")
	fs.StringVar(&cfg.MempoolSocket, "mempool-socket", "", `Unix socket where engines register memfd pools ("" is mempool.sock beside --socket)`)
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, `admin HTTP address for /healthz and /metrics ("" disables)`)
	fs.StringVar(&cfg.AdminToken, "admin-token", os.Getenv("KVMESH_ADMIN_TOKEN"), "bearer token for policy uploads (default $KVMESH_ADMIN_TOKEN; none refuses uploads)")
	mem, disk, maxBlock := agent.Size(cfg.MemCapacity), agent.Size(cfg.DiskCapacity), agent.Size(cfg.MaxBlockSize)
	fs.Var(&mem, "mem-capacity", "bytes of the memory tier (e.g. 512MiB)")
	fs.Var(&disk, "disk-capacity", "bytes of the disk tier (e.g. 100GiB; 0 disables it)")
	fs.Var(&maxBlock, "max-block-size", "largest block accepted")
	namespaces := fs.String("namespaces", strings.Join(cfg.Namespaces, ","), "comma-separated namespaces served (model ids)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.TLSDir, "tls-dir", "", "cluster mode: directory with ca.crt, node.crt, node.key (`kvmesh tls cert create`)")
	fs.BoolVar(&cfg.Dev, "dev", false, "cluster mode with a throwaway dev CA shared by local agents (never in production)")
	fs.StringVar(&cfg.Bind, "bind", agent.DefaultBind, "cluster mode: UDP address of the mesh endpoint (QUIC: gossip and data)")
	fs.StringVar(&cfg.Advertise, "advertise", "", `cluster mode: host:port peers reach this agent at ("" is --bind's)`)
	join := fs.String("join", "", "cluster mode: seed agents, host:port[,host:port…]")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "cluster mode: owners per block (R)")
	fs.StringVar(&cfg.NodeName, "node-name", "", "cluster mode: member name (default: the certificate's CN; under --dev the hostname)")
	fs.StringVar(&cfg.GossipProfile, "gossip-profile", "lan", "cluster mode: gossip timings, lan (data centre) or local (one machine, tests: failures noticed in about a second)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.MemCapacity, cfg.DiskCapacity, cfg.MaxBlockSize = uint64(mem), uint64(disk), uint64(maxBlock)
	cfg.Namespaces = strings.Split(*namespaces, ",")
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
	}
	bindSet := false
	fs.Visit(func(f *flag.Flag) { bindSet = bindSet || f.Name == "bind" })
	if !bindSet && !cfg.ClusterMode() {
		cfg.Bind = "" // the default means nothing to a single node
	}

	a, err := agent.Start(cfg)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	cfg.Logger.Info("shutting down", "signal", s.String())
	if err := a.Close(); err != nil {
		return err
	}
	cfg.Logger.Info("stopped")
	return nil
}
