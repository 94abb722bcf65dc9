// Package tlsdial dials the ssl: endpoints of package endpoint (mutual TLS
// with PEM files, crypto/tls of the standard library). A binary that takes
// ssl: imports it for its effect; see package endpoint's tls.go for why the
// dialer is not there.
package tlsdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

func init() { endpoint.RegisterTLS(dial) }

// config loads t's files for a connection to host.
func config(t endpoint.TLS, host string) (*tls.Config, error) {
	for _, f := range []struct{ field, path string }{{"key", t.Key}, {"cert", t.Cert}, {"ca", t.CA}} {
		if f.path == "" {
			return nil, &endpoint.TLSFileError{Field: f.field, Path: "", Err: errors.New("required for an ssl: endpoint")}
		}
	}
	key, err := os.ReadFile(t.Key)
	if err != nil {
		return nil, &endpoint.TLSFileError{Field: "key", Path: t.Key, Err: err}
	}
	cert, err := os.ReadFile(t.Cert)
	if err != nil {
		return nil, &endpoint.TLSFileError{Field: "cert", Path: t.Cert, Err: err}
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, &endpoint.TLSFileError{Field: "cert", Path: t.Cert, Err: err}
	}
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, &endpoint.TLSFileError{Field: "ca", Path: t.CA, Err: err}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, &endpoint.TLSFileError{Field: "ca", Path: t.CA, Err: errors.New("no PEM certificate in it")}
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// dial connects to HOST:PORT addr and completes the handshake within ctx.
func dial(ctx context.Context, addr string, t endpoint.TLS) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cfg, err := config(t, host)
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var verify *tls.CertificateVerificationError
		if errors.As(err, &verify) || remoteAlert(err) {
			return nil, fmt.Errorf("%w: %v", endpoint.ErrTLSRefused, err)
		}
		return nil, err
	}
	return refusalConn{c.(*tls.Conn)}, nil
}

// refusalConn makes the server's refusal of the client certificate
// endpoint.ErrTLSRefused: in TLS 1.3 it comes as an alert on the first read, after
// the client's handshake is done.
type refusalConn struct{ *tls.Conn }

// Write: the server that refused the certificate may have closed the
// connection before the first write (broken pipe, reset); its alert is then
// still to be read.
func (c refusalConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		return n, nil
	}
	c.Conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, rerr := c.Conn.Read(make([]byte, 1)); remoteAlert(rerr) {
		err = fmt.Errorf("%w: %v", endpoint.ErrTLSRefused, rerr)
	}
	return n, err
}

func (c refusalConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if remoteAlert(err) {
		err = fmt.Errorf("%w: %v", endpoint.ErrTLSRefused, err)
	}
	return n, err
}

// remoteAlert reports whether err is an alert the server sent (crypto/tls
// gives it as a *net.OpError of Op "remote error"): it refused the
// handshake, a certificate above all.
func remoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}
