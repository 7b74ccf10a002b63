package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority and the certificates it signs, written
// as PEM files in its directory.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name, its certificate and key written to
// dir/name.crt and dir/name.key.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	ca := &CA{dir: dir}
	ca.cert, ca.key = issue(t, nil, nil, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}, filepath.Join(dir, name))
	return ca
}

// Leaf issues a certificate for 127.0.0.1 (server and client use),
// written to dir/name.crt and dir/name.key.
func (ca *CA) Leaf(t testing.TB, name string) (crt, key string) {
	t.Helper()
	issue(t, ca.cert, ca.key, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature},
		filepath.Join(ca.dir, name))
	return filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
}

func issue(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate, base string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
