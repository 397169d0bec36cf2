package main

import (
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/kvmesh/kvmesh/agent"
)

// runMembers prints the cluster as the agent at --socket sees it.
func runMembers(args []string) error {
	var cf clientFlags
	fs := flag.NewFlagSet("members", flag.ContinueOnError)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, ctx, cancel, err := cf.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	ms, err := cl.Members(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(ms)
	}
	if ms.Self == "" {
		fmt.Println("single-node mode (start the agent with --tls-dir or --dev to join a mesh)")
		return nil
	}
	fmt.Printf("this agent: %s, replicas %d\n", ms.Self, ms.Replicas)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDRESS\tSTATE\tCAPACITY\tBLOCKS\tVERSION")
	for _, m := range ms.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, m.Address, m.State, agent.Size(m.Capacity), m.Blocks, m.Version)
	}
	return tw.Flush()
}
