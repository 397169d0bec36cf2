package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// serverTLS accepts only peers that offer frame.ALPN and present a
// certificate of the cluster CA. It verifies the client certificate itself,
// in VerifyConnection, rather than with RequireAndVerifyClientCert, so that
// every refusal is logged and counted with the peer's address.
func (e *Endpoint) serverTLS() (*tls.Config, error) {
	base := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{e.id.Cert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{frame.ALPN},
	}
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		peer := "unknown"
		if hello.Conn != nil {
			peer = hello.Conn.RemoteAddr().String()
		}
		if !slices.Contains(hello.SupportedProtos, frame.ALPN) {
			err := fmt.Errorf("peer offers application protocols %q, want %q", hello.SupportedProtos, frame.ALPN)
			e.refusals.record("server", "alpn", peer, err)
			return nil, err
		}
		// The clone shares base's session ticket keys, which quic-go
		// initialises before it clones base, so 0-RTT tickets stay valid
		// across connections.
		c := base.Clone()
		c.GetConfigForClient = nil
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if _, err := e.id.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageClientAuth); err != nil {
				err = fmt.Errorf("client certificate: %w", err)
				e.refusals.record("server", "certificate", peer, err)
				return err
			}
			return nil
		}
		return c, nil
	}
	return base, nil
}

// clientTLS is the configuration for dialling addr. Each peer gets its own
// session cache, so the tickets that let a reconnect send 0-RTT reads are
// never offered to another peer. Host names are not verified: the chain is
// checked against the cluster CA in VerifyConnection, and any member's
// certificate is a valid member.
func (e *Endpoint) clientTLS(addr string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{e.id.Cert},
		NextProtos:         []string{frame.ALPN},
		InsecureSkipVerify: true,
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := e.id.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth); err != nil {
				err = fmt.Errorf("server certificate: %w", err)
				e.refusals.record("client", "certificate", addr, err)
				return err
			}
			return nil
		},
	}
}

// peerName is the node name in a connection's verified peer certificate.
func peerName(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}
