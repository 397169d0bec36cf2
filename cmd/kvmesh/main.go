// Command kvmesh is the kvmesh node agent and the tools that talk to it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// command is one `kvmesh NAME …` subcommand.
type command struct {
	run     func(args []string) error
	summary string
}

// commands lists every subcommand; each lives in its own file.
var commands = map[string]command{
	"agent":   {runAgent, "run the node agent"},
	"bench":   {runBench, "measure the agent's parts (store, …)"},
	"get":     {runGet, "read a block: kvmesh get KEY > FILE"},
	"members": {runMembers, "list the agents of the mesh"},
	"policy":  {runPolicy, "upload, list and roll back the agent's policy modules"},
	"put":     {runPut, "store a block: kvmesh put KEY FILE"},
	"replay":  {runReplay, "replay a request trace through eviction and admission policies"},
	"stat":    {runStat, "show the agent's tiers and counters"},
	"tls":     {runTLS, "make the cluster CA and node certificates"},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "kvmesh: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "kvmesh %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kvmesh COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
}

// printJSON writes v to stdout as indented JSON, for the commands' --json.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
