package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The layout the components' flags name (kubeconf.ControlPlane), each
// certificate signed by the CA for its use and with its identity, and a
// client of a kubeconfig in a TLS handshake with the API server's
// certificate: the server trusts the client, the client the server at
// the address of its subject alternative names.
func TestPKI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	d, err := NewCA(dir, "oidt")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ControlPlane("oidt", "DNS:cp,IP:127.0.0.1,IP:2001:db8::1", "https://127.0.0.1:6443"); err != nil {
		t.Fatal(err)
	}
	// Another process, as the harness's calls are: the CA read again.
	d2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Node("kubelet-n1", "n1", "DNS:n1,IP:192.0.2.2", "https://127.0.0.1:6443", "oidt"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "sa.key", "sa.pub", "apiserver.crt", "apiserver.key",
		"apiserver-kubelet-client.crt", "apiserver-kubelet-client.key", "kubelet-n1.kubeconfig",
		"admin.kubeconfig", "controller-manager.kubeconfig", "scheduler.kubeconfig", "proxy.kubeconfig"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "admin.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.key: %v, mode %v; want 0600", err, fi.Mode())
	}

	roots := x509.NewCertPool()
	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	roots.AddCert(ca)
	for _, c := range []struct {
		name, cn string
		orgs     []string
		dns      string
	}{
		{"apiserver", "kube-apiserver", nil, "kubernetes.default.svc"},
		{"admin", "oidt-admin", []string{"system:masters"}, ""},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, ""},
		{"controller-manager", "system:kube-controller-manager", nil, ""},
		{"scheduler", "system:kube-scheduler", nil, ""},
		{"proxy", "system:kube-proxy", nil, ""},
		{"kubelet-n1", "system:node:n1", []string{"system:nodes"}, "n1"},
	} {
		crt := readCert(t, filepath.Join(dir, c.name+".crt"))
		if crt.Subject.CommonName != c.cn || !slices.Equal(crt.Subject.Organization, c.orgs) {
			t.Errorf("%s: subject %s, want CN=%s O=%v", c.name, crt.Subject, c.cn, c.orgs)
		}
		for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.dns, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
				t.Errorf("%s for %v: %v", c.name, use, err)
			}
		}
	}
	if crt := readCert(t, filepath.Join(dir, "apiserver.crt")); !slices.ContainsFunc(crt.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("2001:db8::1")) }) {
		t.Errorf("apiserver: IP SANs %v lack 2001:db8::1", crt.IPAddresses)
	}

	// The API server's certificate serving, requiring a client certificate of the CA.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()
	for _, k := range []string{"admin", "kubelet-n1"} {
		cfg, err := clientcmd.BuildConfigFromFlags(srv.URL, filepath.Join(dir, k+".kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatalf("%s.kubeconfig against the API server's certificate: %v", k, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := map[string]string{"admin": "oidt-admin", "kubelet-n1": "system:node:n1"}[k]; string(b) != want {
			t.Errorf("%s.kubeconfig: the server saw %q, want %q", k, b, want)
		}
	}
}

func TestParseSANs(t *testing.T) {
	dns, ips, err := ParseSANs("DNS:cp, IP:127.0.0.1,IP:2001:db8::1")
	if err != nil || !slices.Equal(dns, []string{"cp"}) || len(ips) != 2 {
		t.Errorf("got %v %v %v", dns, ips, err)
	}
	for _, bad := range []string{"IP:nope", "email:a@b", "cp"} {
		if _, _, err := ParseSANs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
