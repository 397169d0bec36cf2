package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvmesh/kvmesh/agent"
	"github.com/kvmesh/kvmesh/client"
	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// clientFlags are the flags every command that talks to an agent takes.
type clientFlags struct {
	socket    string
	namespace string
	timeout   time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.socket, "socket", agent.DefaultSocket(), "Unix socket of the agent")
	fs.StringVar(&c.namespace, "namespace", "", `namespace ("" is "default")`)
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
}

func (c *clientFlags) dial() (*client.Client, context.Context, context.CancelFunc, error) {
	if _, err := os.Stat(c.socket); err != nil {
		return nil, nil, nil, fmt.Errorf("no agent socket at %s (is `kvmesh agent` running? pick one with --socket)", c.socket)
	}
	cl, err := client.Dial(c.socket)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	return cl, ctx, cancel, nil
}

func runPut(args []string) error {
	var cf clientFlags
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	cf.register(fs)
	dur := fs.String("durability", "memory", "acknowledge after: memory, disk or replicated")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kvmesh put [flags] KEY FILE  (FILE - reads stdin)")
		fs.PrintDefaults()
	}
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return flag.ErrHelp
	}
	d, ok := kvmeshv1.Durability_value["DURABILITY_"+strings.ToUpper(*dur)]
	if !ok {
		return fmt.Errorf("--durability %q: want memory, disk or replicated", *dur)
	}
	var value []byte
	var err error
	if fs.Arg(1) == "-" {
		value, err = io.ReadAll(os.Stdin)
	} else {
		value, err = os.ReadFile(fs.Arg(1))
	}
	if err != nil {
		return err
	}
	cl, ctx, cancel, err := cf.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	return cl.Put(ctx, cf.namespace, []byte(fs.Arg(0)), value, kvmeshv1.Durability(d))
}

func runGet(args []string) error {
	var cf clientFlags
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	cf.register(fs)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: kvmesh get [flags] KEY > FILE"); fs.PrintDefaults() }
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return flag.ErrHelp
	}
	cl, ctx, cancel, err := cf.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer cl.Close()
	v, err := cl.Get(ctx, cf.namespace, []byte(fs.Arg(0)))
	var ke *client.KeyError
	if errors.As(err, &ke) && ke.Code == client.NotFound {
		return fmt.Errorf("key %q not found", fs.Arg(0))
	}
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(v)
	return err
}

func runStat(args []string) error {
	var cf clientFlags
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
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
	st, err := cl.Stat(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(st)
	}
	fmt.Printf("kvmesh agent %s, up %s, namespaces %v\n", st.Version,
		(time.Duration(st.UptimeSeconds) * time.Second).String(), st.Namespaces)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tUSED\tCAPACITY\tBLOCKS\tHITS\tMISSES\tEVICTIONS")
	for _, t := range st.Tiers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", t.Tier, agent.Size(t.UsedBytes), agent.Size(t.CapacityBytes),
			t.Blocks, t.Hits, t.Misses, t.Evictions)
	}
	tw.Flush()
	fmt.Printf("blocks %d, pinned %d, corrupt dropped %d, demotions %d, prefetched %d, disk write errors %d\n",
		st.Blocks, st.Pinned, st.CorruptDropped, st.Demotions, st.Prefetched, st.DiskWriteErrors)
	return nil
}

// parseInterspersed parses flags that may come after positional arguments,
// as in `kvmesh put KEY FILE --durability disk`.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}
