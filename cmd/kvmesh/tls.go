package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/transport/tlsca"
)

const tlsUsage = `usage:
  kvmesh tls ca create --out DIR [--cluster NAME] [--days N]
  kvmesh tls cert create --ca DIR --node NAME [--ip IP]... --out DIR [--days N]

The CA directory holds ca.crt and ca.key (keep it off the nodes). A node
directory, the agent's --tls-dir, holds ca.crt, node.crt and node.key.`

// runTLS makes a cluster CA and node certificates.
func runTLS(args []string) error {
	if len(args) < 2 || args[1] != "create" || (args[0] != "ca" && args[0] != "cert") {
		return errors.New(tlsUsage)
	}
	if args[0] == "ca" {
		return tlsCACreate(args[2:])
	}
	return tlsCertCreate(args[2:])
}

func tlsCACreate(args []string) error {
	fs := flag.NewFlagSet("tls ca create", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write ca.crt and ca.key into")
	cluster := fs.String("cluster", "kvmesh", "cluster name, recorded in the CA's subject")
	days := fs.Int("days", int(tlsca.CAValidity/(24*time.Hour)), "validity in days")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *days < 1 {
		return errors.New("--out is required and --days must be positive\n" + tlsUsage)
	}
	ca, err := tlsca.NewCA(*cluster, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	if err := ca.Save(*out); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s (cluster %q, valid until %s)\n",
		filepath.Join(*out, tlsca.CACertFile), filepath.Join(*out, tlsca.CAKeyFile), *cluster, ca.Cert.NotAfter.Format(time.DateOnly))
	return nil
}

// ipList is a repeatable, comma-separable --ip flag.
type ipList []net.IP

func (l *ipList) String() string { return fmt.Sprint([]net.IP(*l)) }

func (l *ipList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		ip := net.ParseIP(strings.TrimSpace(part))
		if ip == nil {
			return fmt.Errorf("%q is not an IP address", part)
		}
		*l = append(*l, ip)
	}
	return nil
}

func tlsCertCreate(args []string) error {
	fs := flag.NewFlagSet("tls cert create", flag.ContinueOnError)
	caDir := fs.String("ca", "", "CA directory (from kvmesh tls ca create)")
	node := fs.String("node", "", "node name: the certificate's CN and DNS SAN, and the node's member name")
	var ips ipList
	fs.Var(&ips, "ip", "IP SAN (repeat or comma-separate)")
	out := fs.String("out", "", "node directory to write ca.crt, node.crt and node.key into")
	days := fs.Int("days", int(tlsca.NodeValidity/(24*time.Hour)), "validity in days")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *caDir == "" || *node == "" || *out == "" || *days < 1 {
		return errors.New("--ca, --node and --out are required and --days must be positive\n" + tlsUsage)
	}
	ca, err := tlsca.LoadCA(*caDir)
	if err != nil {
		return err
	}
	id, err := ca.Issue(*node, ips, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	if err := id.Save(*out); err != nil {
		return err
	}
	fmt.Printf("wrote %s/{%s,%s,%s} for node %q (IPs %v, valid until %s)\n",
		*out, tlsca.CACertFile, tlsca.NodeCertFile, tlsca.NodeKeyFile, *node, ips.String(), id.Cert.Leaf.NotAfter.Format(time.DateOnly))
	return nil
}
