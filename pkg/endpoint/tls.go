// TLS for "ssl:HOST:PORT": mutual TLS with PEM files, the client side of
// ovsdb-server's --private-key, --certificate and --ca-cert.

package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// TLS names the PEM files of an ssl: endpoint: the client's private key
// and certificate (ovsdb-server verifies them against its --ca-cert) and
// the CA that signed the server's certificate.
type TLS struct {
	Key, Cert, CA string
}

// TLSFileError says that a PEM file of TLS cannot be used. Field is
// "key", "cert" or "ca".
type TLSFileError struct {
	Field, Path string
	Err         error
}

func (e *TLSFileError) Error() string {
	return fmt.Sprintf("TLS %s file %q: %v", e.Field, e.Path, e.Err)
}

func (e *TLSFileError) Unwrap() error { return e.Err }

// ErrTLSRefused says that the TLS handshake failed on a certificate: the
// server's is not signed by the CA given, or the server refused ours. A
// retry meets the same certificates: the configuration must change.
var ErrTLSRefused = errors.New("TLS handshake refused on a certificate")

// config loads t's files for a connection to host.
func (t TLS) config(host string) (*tls.Config, error) {
	for _, f := range []struct{ field, path string }{{"key", t.Key}, {"cert", t.Cert}, {"ca", t.CA}} {
		if f.path == "" {
			return nil, &TLSFileError{Field: f.field, Path: "", Err: errors.New("required for an ssl: endpoint")}
		}
	}
	key, err := os.ReadFile(t.Key)
	if err != nil {
		return nil, &TLSFileError{Field: "key", Path: t.Key, Err: err}
	}
	cert, err := os.ReadFile(t.Cert)
	if err != nil {
		return nil, &TLSFileError{Field: "cert", Path: t.Cert, Err: err}
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, &TLSFileError{Field: "cert", Path: t.Cert, Err: err}
	}
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, &TLSFileError{Field: "ca", Path: t.CA, Err: err}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, &TLSFileError{Field: "ca", Path: t.CA, Err: errors.New("no PEM certificate in it")}
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// dialTLS connects to HOST:PORT addr and completes the handshake within ctx.
func dialTLS(ctx context.Context, addr string, t TLS) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cfg, err := t.config(host)
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var verify *tls.CertificateVerificationError
		if errors.As(err, &verify) || remoteAlert(err) {
			return nil, fmt.Errorf("%w: %v", ErrTLSRefused, err)
		}
		return nil, err
	}
	return refusalConn{c.(*tls.Conn)}, nil
}

// refusalConn makes the server's refusal of the client certificate
// ErrTLSRefused: in TLS 1.3 it comes as an alert on the first read, after
// the client's handshake is done.
type refusalConn struct{ *tls.Conn }

func (c refusalConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if remoteAlert(err) {
		err = fmt.Errorf("%w: %v", ErrTLSRefused, err)
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
