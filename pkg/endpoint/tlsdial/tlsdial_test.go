package tlsdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/internal/certtest"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// serveTLS accepts mutual TLS on 127.0.0.1 with f's server certificate,
// requiring a client certificate signed by f's CA, and echoes a line.
func serveTLS(t *testing.T, f certtest.Files) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 16)
				n, _ := c.Read(buf)
				c.Write(buf[:n])
			}()
		}
	}()
	return l.Addr().String()
}

func TestDialTLS(t *testing.T) {
	dir := t.TempDir()
	good, other := certtest.Generate(t, dir, "good"), certtest.Generate(t, dir, "other")
	addr := serveTLS(t, good)
	e, err := endpoint.Parse("ssl:" + addr)
	if err != nil {
		t.Fatal(err)
	}
	dialWith := func(tlsFiles endpoint.TLS) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.TLS = tlsFiles
		c, err := e.Dial(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		// The server's verdict on the client certificate comes with the
		// first read (TLS 1.3 sends it after the client's Finished).
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("hi")); err != nil {
			return err
		}
		buf := make([]byte, 2)
		_, err = c.Read(buf)
		return err
	}
	if err := dialWith(endpoint.TLS{Key: good.ClientKey, Cert: good.ClientCert, CA: good.CA}); err != nil {
		t.Fatalf("the right CA and client certificate: %v", err)
	}
	if err := dialWith(endpoint.TLS{Key: good.ClientKey, Cert: good.ClientCert, CA: other.CA}); !errors.Is(err, endpoint.ErrTLSRefused) {
		t.Errorf("a CA that did not sign the server's certificate: got %v, want endpoint.ErrTLSRefused", err)
	}
	if err := dialWith(endpoint.TLS{Key: other.ClientKey, Cert: other.ClientCert, CA: good.CA}); !errors.Is(err, endpoint.ErrTLSRefused) {
		t.Errorf("a client certificate the server's CA did not sign: got %v, want endpoint.ErrTLSRefused", err)
	}
	var file *endpoint.TLSFileError
	if err := dialWith(endpoint.TLS{Key: good.ClientKey, Cert: good.ClientCert, CA: dir + "/missing.pem"}); !errors.As(err, &file) || file.Field != "ca" {
		t.Errorf("a missing CA file: got %v, want a *TLSFileError of the ca", err)
	}
	if err := dialWith(endpoint.TLS{Key: good.ClientKey, Cert: good.ClientCert}); !errors.As(err, &file) || file.Field != "ca" {
		t.Errorf("no CA: got %v, want a *TLSFileError of the ca", err)
	}
	if err := dialWith(endpoint.TLS{Key: good.ClientKey, Cert: good.ServerCert, CA: good.CA}); !errors.As(err, &file) || file.Field != "cert" {
		t.Errorf("a certificate not of the key: got %v, want a *TLSFileError of the cert", err)
	}
}
