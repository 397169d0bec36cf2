package tlsca

import (
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func newCA(t *testing.T, cluster string) *CA {
	t.Helper()
	ca, err := NewCA(cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestCAAndNodeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "prod")
	if err := ca.Save(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := loaded.Issue("node-a", []net.IP{net.ParseIP("127.0.0.7")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Save(filepath.Join(dir, "node-a")); err != nil {
		t.Fatal(err)
	}
	got, err := Load(filepath.Join(dir, "node-a"))
	if err != nil {
		t.Fatal(err)
	}
	leaf := got.Cert.Leaf
	if got.Name != "node-a" || leaf.DNSNames[0] != "node-a" || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.7")) {
		t.Fatalf("node certificate: CN %q DNS %v IP %v", got.Name, leaf.DNSNames, leaf.IPAddresses)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if name, err := got.VerifyPeer([]*x509.Certificate{leaf}, usage); err != nil || name != "node-a" {
			t.Fatalf("VerifyPeer(%v) = %q, %v", usage, name, err)
		}
	}
	for name, mode := range map[string]os.FileMode{"ca/ca.key": 0o600, "node-a/node.key": 0o600, "node-a/node.crt": 0o644} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Fatalf("%s: mode %v, %v; want %v", name, st.Mode().Perm(), err, mode)
		}
	}
}

func TestVerifyPeerRejectsOtherCluster(t *testing.T) {
	ours, err := newCA(t, "a").Issue("n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := newCA(t, "b").Issue("n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ours.VerifyPeer([]*x509.Certificate{theirs.Cert.Leaf}, x509.ExtKeyUsageClientAuth); err == nil {
		t.Fatal("a certificate from another CA verified")
	}
	if _, err := ours.VerifyPeer(nil, x509.ExtKeyUsageClientAuth); err == nil {
		t.Fatal("an empty chain verified")
	}
}

func TestLoadRejectsMismatchedDirectory(t *testing.T) {
	dir := t.TempDir()
	id, err := newCA(t, "a").Issue("n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	other := newCA(t, "b")
	if err := os.WriteFile(filepath.Join(dir, CACertFile), encodeCert(other.Cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("Load accepted a node certificate that does not chain to ca.crt")
	}
}

func TestSaveRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	if err := newCA(t, "a").Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := newCA(t, "a").Save(dir); err == nil {
		t.Fatal("Save replaced an existing CA")
	}
}

func TestSecretIsStablePerKey(t *testing.T) {
	ca := newCA(t, "a")
	id1, _ := ca.Issue("n1", nil, time.Hour)
	id2, _ := ca.Issue("n1", nil, time.Hour)
	a, err := id1.Secret("reset")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := id1.Secret("reset")
	c, _ := id1.Secret("other")
	d, _ := id2.Secret("reset")
	if a != b || a == c || a == d {
		t.Fatal("Secret must depend on exactly the key and the label")
	}
}

// Dev agents started at once on one machine must end up trusting each
// other: one shared throwaway CA.
func TestDevAgentsShareOneCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev-ca")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ids := make([]*Identity, 4)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			id, err := Dev(dir, "dev", nil, log)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = id
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, id := range ids[1:] {
		if _, err := ids[0].VerifyPeer([]*x509.Certificate{id.Cert.Leaf}, x509.ExtKeyUsageClientAuth); err != nil {
			t.Fatalf("dev identities do not trust each other: %v", err)
		}
	}
}
