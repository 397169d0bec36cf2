package main

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"

	"github.com/kvmesh/kvmesh/transport/tlsca"
)

// The CLI writes a CA and a node directory that the agent's loader accepts.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	caDir, nodeDir := filepath.Join(dir, "ca"), filepath.Join(dir, "node-a")
	if err := runTLS([]string{"ca", "create", "--out", caDir, "--cluster", "test"}); err != nil {
		t.Fatal(err)
	}
	if err := runTLS([]string{"cert", "create", "--ca", caDir, "--node", "node-a", "--ip", "127.0.0.5,::1", "--ip", "10.1.2.3", "--out", nodeDir}); err != nil {
		t.Fatal(err)
	}
	id, err := tlsca.Load(nodeDir)
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "node-a" || len(id.Cert.Leaf.IPAddresses) != 3 || !id.Cert.Leaf.IPAddresses[2].Equal(net.ParseIP("10.1.2.3")) {
		t.Fatalf("node certificate: %q %v", id.Name, id.Cert.Leaf.IPAddresses)
	}
	if _, err := id.VerifyPeer([]*x509.Certificate{id.Cert.Leaf}, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatal(err)
	}
	if err := runTLS([]string{"ca", "create", "--out", caDir}); err == nil {
		t.Fatal("tls ca create overwrote an existing CA")
	}
	if err := runTLS([]string{"cert", "create", "--ca", caDir, "--node", "x", "--ip", "not-an-ip", "--out", filepath.Join(dir, "x")}); err == nil {
		t.Fatal("tls cert create accepted a bad --ip")
	}
}
