package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/kvmesh/kvmesh/transport/gossip"
	"github.com/kvmesh/kvmesh/transport/localmesh"
	"github.com/kvmesh/kvmesh/transport/placement"
)

// benchCluster runs in-process members on loopback addresses (127.0.0.x),
// gossiping over kvmesh's QUIC endpoints with the Local presets, and
// measures how fast membership converges after a join, how fast a crash is
// noticed, and how many keys a join moves.
func benchCluster(args []string) error {
	fs := flag.NewFlagSet("bench cluster", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object")
	nodes := fs.Int("nodes", 16, "members")
	keys := fs.Int("keys", 100000, "keys placed to count moves")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on a phase after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes < 3 || *nodes > 250 || *keys < 1 {
		return errors.New("bench cluster: --nodes must be 3…250 and --keys positive")
	}
	cluster, err := localmesh.New(localmesh.LocalOptions(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	defer cluster.Close()
	meta := gossip.Meta{Capacity: 64 << 30, Version: "bench"}
	members := make([]*localmesh.Member, *nodes)
	for i := range members {
		if members[i], err = cluster.Start(fmt.Sprintf("node-%03d", i), meta); err != nil {
			return err
		}
	}

	// 1. Every member but the seed joins through the seed at once.
	start := time.Now()
	if err := localmesh.JoinAll(members[0], members[1:]); err != nil {
		return err
	}
	if _, err := localmesh.WaitFor(*timeout, func() bool {
		return localmesh.Sees(members, localmesh.Names(members)...)
	}); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	converged := time.Since(start)

	// 2. A member crashes; every survivor must declare it dead.
	crashed := members[len(members)-1]
	survivors := members[:len(members)-1]
	crashed.Crash()
	detected, err := localmesh.WaitFor(*timeout, func() bool {
		return localmesh.Sees(survivors, localmesh.Names(survivors)...)
	})
	if err != nil {
		return fmt.Errorf("failure detection: %w", err)
	}

	// 3. A new member joins the survivors: how many keys change primary
	// owner, as every member computes it from its member list.
	before := placementOf(members[0])
	joiner, err := cluster.Start(fmt.Sprintf("node-%03d", len(members)), meta)
	if err != nil {
		return err
	}
	if _, err := joiner.Join([]string{members[0].Endpoint.Advertise()}); err != nil {
		return err
	}
	all := append(survivors[:len(survivors):len(survivors)], joiner)
	rejoined, err := localmesh.WaitFor(*timeout, func() bool {
		return localmesh.Sees(all, localmesh.Names(all)...)
	})
	if err != nil {
		return fmt.Errorf("second join: %w", err)
	}
	after := placementOf(members[0])
	moved := 0
	for i := range *keys {
		k := fmt.Appendf(nil, "bench/%016x", i)
		if before.Primary(k) != after.Primary(k) {
			moved++
		}
	}

	res := struct {
		Nodes            int     `json:"nodes"`
		JoinConvergenceS float64 `json:"join_convergence_s"`
		FailureDetectS   float64 `json:"failure_detection_s"`
		OneJoinS         float64 `json:"one_join_convergence_s"`
		MovedFraction    float64 `json:"keys_moved_fraction"`
		MovedIdeal       float64 `json:"keys_moved_ideal"`
		Preset           string  `json:"preset"`
	}{
		Nodes:            *nodes,
		JoinConvergenceS: converged.Seconds(),
		FailureDetectS:   detected.Seconds(),
		OneJoinS:         rejoined.Seconds(),
		MovedFraction:    float64(moved) / float64(*keys),
		MovedIdeal:       1 / float64(len(all)),
		Preset:           "local",
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("%d members on 127.0.0.x, gossip over QUIC, Local presets:\n", *nodes)
	fmt.Printf("  all join through one seed: every member sees all after %v\n", converged.Round(time.Millisecond))
	fmt.Printf("  one member crashes:        every survivor declares it dead after %v\n", detected.Round(time.Millisecond))
	fmt.Printf("  one member joins:          seen by all after %v; %.4f of keys moved (ideal 1/%d = %.4f)\n",
		rejoined.Round(time.Millisecond), res.MovedFraction, len(all), res.MovedIdeal)
	return nil
}

// placementOf is the placement table m computes from its member list,
// weighted by each member's announced capacity.
func placementOf(m *localmesh.Member) *placement.Table {
	var ms []placement.Member
	for _, mem := range m.Members() {
		ms = append(ms, placement.Member{Name: mem.Name, Weight: float64(mem.Meta.Capacity)})
	}
	return placement.New(ms)
}
