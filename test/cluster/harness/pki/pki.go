// Package pki writes a test cluster's public key infrastructure into one
// directory, as kubeadm lays it out for its components: a CA (ca.crt,
// ca.key), the ServiceAccount token key pair (sa.key, sa.pub), a
// certificate and key per component (NAME.crt, NAME.key, signed by the CA,
// for serving and client use) and a kubeconfig per client
// (NAME.kubeconfig: the API server's URL, the CA, NAME's certificate).
// Keys are ECDSA P-256, which every Kubernetes component takes and which
// costs a fraction of RSA's key generation.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Validity is how long the certificates are valid: a test cluster lives
// for a run.
const Validity = 48 * time.Hour

// Dir is a PKI directory with its CA.
type Dir struct {
	Path string
	ca   *x509.Certificate
	key  crypto.Signer
}

// NewCA creates dir with a new CA named after tag and the ServiceAccount
// key pair.
func NewCA(dir, tag string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := template(pkix.Name{CommonName: tag + "-kube-ca"})
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	d := &Dir{Path: dir, ca: ca, key: key}
	if err := d.write("ca", der, key); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return nil, err
	}
	return d, os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// Open reads the CA of an existing dir.
func Open(dir string) (*Dir, error) {
	crt, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(crt)
	if b == nil {
		return nil, fmt.Errorf("%s/ca.crt: no PEM block", dir)
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s/ca.crt: %w", dir, err)
	}
	k, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	if b, _ = pem.Decode(k); b == nil {
		return nil, fmt.Errorf("%s/ca.key: no PEM block", dir)
	}
	key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s/ca.key: %w", dir, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s/ca.key: not a signing key", dir)
	}
	return &Dir{Path: dir, ca: ca, key: signer}, nil
}

// ParseSANs reads openssl's subjectAltName form, "DNS:name,IP:address,...".
func ParseSANs(s string) (dns []string, ips []net.IP, err error) {
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		kind, v, _ := strings.Cut(f, ":")
		switch kind {
		case "DNS":
			dns = append(dns, v)
		case "IP":
			ip := net.ParseIP(v)
			if ip == nil {
				return nil, nil, fmt.Errorf("subject alternative name %q: not an IP address", f)
			}
			ips = append(ips, ip)
		default:
			return nil, nil, fmt.Errorf("subject alternative name %q: want DNS:name or IP:address", f)
		}
	}
	return dns, ips, nil
}

// Issue writes NAME.crt and NAME.key: a new key's certificate for subject
// and the subject alternative names sans (ParseSANs' form), signed by the
// CA, for serving and client use.
func (d *Dir) Issue(name string, subject pkix.Name, sans string) error {
	dns, ips, err := ParseSANs(sans)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl, err := template(subject)
	if err != nil {
		return err
	}
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames, tmpl.IPAddresses = dns, ips
	der, err := x509.CreateCertificate(rand.Reader, tmpl, d.ca, key.Public(), d.key)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return d.write(name, der, key)
}

// Kubeconfig writes NAME.kubeconfig: the user of NAME.crt and NAME.key at
// server, trusting the CA, in a cluster and context named cluster.
func (d *Dir) Kubeconfig(name, server, cluster string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: filepath.Join(d.Path, "ca.crt")}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(d.Path, name+".crt"),
		ClientKey:         filepath.Join(d.Path, name+".key"),
	}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: name}
	cfg.CurrentContext = cluster
	return clientcmd.WriteToFile(*cfg, filepath.Join(d.Path, name+".kubeconfig"))
}

// ControlPlane writes the certificates of the API server (with the
// subject alternative names apiserverSANs besides its kubernetes.default
// names) and of its kubelet client, and the certificates and kubeconfigs
// (server, cluster tag) of the clients that are not nodes: admin,
// controller manager, scheduler, kube-proxy.
func (d *Dir) ControlPlane(tag, apiserverSANs, server string) error {
	masters := []string{"system:masters"}
	for _, c := range []struct {
		name string
		subj pkix.Name
		sans string
	}{
		{"apiserver", pkix.Name{CommonName: "kube-apiserver"},
			"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local," + apiserverSANs},
		{"apiserver-kubelet-client", pkix.Name{Organization: masters, CommonName: "kube-apiserver-kubelet-client"}, ""},
		{"admin", pkix.Name{Organization: masters, CommonName: tag + "-admin"}, ""},
		{"controller-manager", pkix.Name{CommonName: "system:kube-controller-manager"}, ""},
		{"scheduler", pkix.Name{CommonName: "system:kube-scheduler"}, ""},
		{"proxy", pkix.Name{CommonName: "system:kube-proxy"}, ""},
	} {
		if err := d.Issue(c.name, c.subj, c.sans); err != nil {
			return err
		}
	}
	for _, k := range []string{"admin", "controller-manager", "scheduler", "proxy"} {
		if err := d.Kubeconfig(k, server, tag); err != nil {
			return err
		}
	}
	return nil
}

// Node writes a kubelet's certificate, NAME.crt (group system:nodes, user
// system:node:NODE, so that the Node authorizer lets it act for node; its
// serving names sans), and its kubeconfig.
func (d *Dir) Node(name, node, sans, server, tag string) error {
	if node == "" {
		return errors.New("no node name")
	}
	if err := d.Issue(name, pkix.Name{Organization: []string{"system:nodes"}, CommonName: "system:node:" + node}, sans); err != nil {
		return err
	}
	return d.Kubeconfig(name, server, tag)
}

func template(subject pkix.Name) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(Validity)}, nil
}

func (d *Dir) write(name string, der []byte, key crypto.Signer) error {
	if err := writeKey(filepath.Join(d.Path, name+".key"), key); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.Path, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
