// Package tlsca makes and loads the certificates of a kvmesh cluster: one
// cluster CA, and per node one ECDSA P-256 certificate that the CA signed,
// valid for both TLS server and client authentication, so every connection
// between agents is verified both ways against the cluster CA.
//
// Files (PEM):
//
//	CA directory (kvmesh tls ca create --out DIR):
//	  ca.crt    the cluster CA certificate
//	  ca.key    its private key (PKCS#8, mode 0600): keep it off the nodes
//
//	node directory, the agent's --tls-dir (kvmesh tls cert create --out DIR):
//	  ca.crt    the cluster CA certificate, the only trust root
//	  node.crt  this node's certificate (CN and DNS SAN = node name, IP SANs)
//	  node.key  its private key (PKCS#8, mode 0600)
package tlsca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside a CA directory and a node's --tls-dir.
const (
	CACertFile   = "ca.crt"
	CAKeyFile    = "ca.key"
	NodeCertFile = "node.crt"
	NodeKeyFile  = "node.key"
)

// Default lifetimes.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	NodeValidity = 365 * 24 * time.Hour
)

// CA is a cluster certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA creates a CA for the named cluster, valid for the given duration.
func NewCA(cluster string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kvmesh cluster CA " + cluster, Organization: []string{cluster}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between nodes
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // node certificates only, no intermediates
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue signs a certificate for the named node, usable as TLS server and
// client, with the node name as CN and DNS SAN plus the given IP SANs.
func (ca *CA) Issue(node string, ips []net.IP, validity time.Duration) (*Identity, error) {
	if node == "" {
		return nil, errors.New("tlsca: empty node name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: node, Organization: ca.Cert.Subject.Organization},
		DNSNames:     []string{node},
		IPAddresses:  ips,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newIdentity(ca.Cert, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf})
}

// Save writes ca.crt and ca.key into dir (created 0700), refusing to
// overwrite an existing CA.
func (ca *CA) Save(dir string) error {
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return err
	}
	return writeFiles(dir, map[string][]byte{
		CACertFile: encodeCert(ca.Cert.Raw),
		CAKeyFile:  keyPEM,
	})
}

// LoadCA reads a CA directory written by Save.
func LoadCA(dir string) (*CA, error) {
	cert, err := readCert(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("tlsca: %s is not a CA certificate", filepath.Join(dir, CACertFile))
	}
	key, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("tlsca: %s holds no PEM certificate", path)
	}
	return x509.ParseCertificate(block.Bytes)
}

func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("tlsca: %s holds no PEM PKCS#8 private key", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsca: %s: %w", path, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("tlsca: %s: key of type %T cannot sign", path, key)
	}
	return signer, nil
}

// writeFiles creates dir (0700) and writes each file (0600 for keys, 0644
// otherwise), refusing to replace any file that exists.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("tlsca: %s exists; remove it first to replace it", filepath.Join(dir, name))
		}
	}
	for name, data := range files {
		mode := os.FileMode(0o644)
		if name == CAKeyFile || name == NodeKeyFile {
			mode = 0o600
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
