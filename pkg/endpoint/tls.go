// TLS for "ssl:HOST:PORT": mutual TLS with PEM files, the client side of
// ovsdb-server's --private-key, --certificate and --ca-cert. The dialer
// itself is package tlsdial, which a plugin that takes ssl: imports: it
// links crypto/tls, which costs every process of the binary in size and
// start-up (docs/performance.md, "Design costs"), and ovs-portmap and
// ovs-bandwidth have no use for it.

package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// ErrNoTLS says that an ssl: endpoint was dialled by a binary without
// package tlsdial.
var ErrNoTLS = errors.New("ssl: endpoints are not supported by this plugin")

// tlsDial is package tlsdial's dialer, once it is linked in.
var tlsDial func(ctx context.Context, addr string, t TLS) (net.Conn, error)

// RegisterTLS makes d the dialer of ssl: endpoints (package tlsdial calls
// it when it is linked in).
func RegisterTLS(d func(ctx context.Context, addr string, t TLS) (net.Conn, error)) { tlsDial = d }

// TLSLinked reports whether this binary dials ssl: endpoints (package
// tlsdial is linked in).
func TLSLinked() bool { return tlsDial != nil }

func dialTLS(ctx context.Context, addr string, t TLS) (net.Conn, error) {
	if tlsDial == nil {
		return nil, ErrNoTLS
	}
	return tlsDial(ctx, addr, t)
}

// ErrTLSRefused says that the TLS handshake failed on a certificate: the
// server's is not signed by the CA given, or the server refused ours. A
// retry meets the same certificates: the configuration must change.
var ErrTLSRefused = errors.New("TLS handshake refused on a certificate")
