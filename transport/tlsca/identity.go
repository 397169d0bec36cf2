package tlsca

import (
	"crypto"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
)

// Identity is what a node presents and trusts: its certificate and key, and
// the cluster CA that every peer's certificate must chain to.
type Identity struct {
	// Name is the node name, the certificate's common name.
	Name string
	// Cert is the node's certificate with its private key; Leaf is set.
	Cert tls.Certificate
	// CA is the cluster CA certificate, the only trust root.
	CA *x509.Certificate

	roots *x509.CertPool
}

func newIdentity(ca *x509.Certificate, cert tls.Certificate) (*Identity, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	id := &Identity{Name: cert.Leaf.Subject.CommonName, Cert: cert, CA: ca, roots: roots}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := id.VerifyPeer([]*x509.Certificate{cert.Leaf}, usage); err != nil {
			return nil, fmt.Errorf("tlsca: node certificate %q: %w", id.Name, err)
		}
	}
	return id, nil
}

// VerifyPeer checks a peer's certificate chain (leaf first, as TLS presents
// it) against the cluster CA for the given use (x509.ExtKeyUsageServerAuth
// when we dialled, ClientAuth when the peer did) and returns the peer's node
// name. Host names are not checked: every certificate the cluster CA issued
// is a member alike, and members are dialled by address.
func (id *Identity) VerifyPeer(chain []*x509.Certificate, usage x509.ExtKeyUsage) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         id.roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}); err != nil {
		return "", err
	}
	return chain[0].Subject.CommonName, nil
}

// Secret derives a 32-byte secret for label from the node's private key: the
// same across restarts of the node, unknown to anyone without the key. The
// transport keys its QUIC stateless resets with it, so a restarted node can
// end the connections its previous run left open.
func (id *Identity) Secret(label string) ([32]byte, error) {
	var out [32]byte
	der, err := x509.MarshalPKCS8PrivateKey(id.Cert.PrivateKey)
	if err != nil {
		return out, err
	}
	key, err := hkdf.Key(sha256.New, der, nil, "kvmesh "+label, len(out))
	if err != nil {
		return out, err
	}
	copy(out[:], key)
	return out, nil
}

// Save writes the node directory layout (ca.crt, node.crt, node.key) into
// dir, refusing to overwrite existing files.
func (id *Identity) Save(dir string) error {
	signer, ok := id.Cert.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("tlsca: key of type %T cannot sign", id.Cert.PrivateKey)
	}
	keyPEM, err := encodeKey(signer)
	if err != nil {
		return err
	}
	var chain []byte
	for _, der := range id.Cert.Certificate {
		chain = append(chain, encodeCert(der)...)
	}
	return writeFiles(dir, map[string][]byte{
		CACertFile:   encodeCert(id.CA.Raw),
		NodeCertFile: chain,
		NodeKeyFile:  keyPEM,
	})
}

// Load reads a node directory (the agent's --tls-dir) and checks that the
// node certificate matches its key and chains to ca.crt.
func Load(dir string) (*Identity, error) {
	ca, err := readCert(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile))
	if err != nil {
		return nil, fmt.Errorf("tlsca: %s: %w", dir, err)
	}
	return newIdentity(ca, cert)
}

// DevCADir is where Dev keeps the throwaway CA that local dev agents share.
var DevCADir = filepath.Join(os.TempDir(), "kvmesh-dev-ca")

// Dev returns an identity for a local playground: a fresh in-memory node
// certificate from a throwaway CA kept in caDir (created on first use, so
// several dev agents on one machine trust each other). It logs loudly that
// the node is not secured by a cluster CA.
func Dev(caDir, node string, ips []net.IP, log *slog.Logger) (*Identity, error) {
	ca, err := loadOrCreateDevCA(caDir)
	if err != nil {
		return nil, err
	}
	id, err := ca.Issue(node, ips, NodeValidity)
	if err != nil {
		return nil, err
	}
	log.Warn("DEV MODE: mesh TLS uses a throwaway CA; any process that can read the CA directory can join this cluster. Never use --dev outside a local playground.",
		"ca_dir", caDir, "node", node)
	return id, nil
}

// loadOrCreateDevCA loads the dev CA, or creates it in a temporary directory
// renamed into place, so concurrent first starts agree on one CA.
func loadOrCreateDevCA(dir string) (*CA, error) {
	if ca, err := LoadCA(dir); err == nil {
		return ca, nil
	}
	ca, err := NewCA("dev", CAValidity)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".kvmesh-dev-ca-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	staged := filepath.Join(tmp, "ca")
	if err := ca.Save(staged); err != nil {
		return nil, err
	}
	if err := os.Rename(staged, dir); err != nil {
		// Another agent won the race, or a half-written directory is in
		// the way; either way what is there now decides.
		return LoadCA(dir)
	}
	return ca, nil
}
