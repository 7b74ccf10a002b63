package pid1

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hecsys/hec/test/testutil"
)

// TestProbeClientPinsTheAgentsCertificate: the loader's HTTPS probes
// reach the agent holding the certificate it was given (on whatever
// address), and no other server, whoever signed its certificate.
func TestProbeClientPinsTheAgentsCertificate(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) {}
	agent := httptest.NewTLSServer(http.HandlerFunc(ok))
	defer agent.Close()
	// Every httptest server has the same certificate: the other one gets
	// its own.
	dir := t.TempDir()
	crt, key := testutil.NewCA(t, dir, "ca").Leaf(t, "other")
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	other := httptest.NewUnstartedServer(http.HandlerFunc(ok))
	other.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	other.StartTLS()
	defer other.Close()
	certFile := filepath.Join(t.TempDir(), "agent.crt")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: agent.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := probeClient(LoaderOptions{MgmtCert: certFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(c, agent.URL, "/readyz", ""); err != nil {
		t.Errorf("the agent: %v", err)
	}
	if err := probe(c, other.URL, "/readyz", ""); err == nil || !strings.Contains(err.Error(), "not the agent's") {
		t.Errorf("another server: %v, want refused", err)
	}
	for _, o := range []LoaderOptions{
		{ProbeCert: certFile, ProbeKey: certFile},      // no TLS to present it to
		{MgmtCert: certFile, ProbeCert: certFile},      // no key
		{MgmtCert: filepath.Join(t.TempDir(), "none")}, // no such file
	} {
		if _, err := probeClient(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if c, err := probeClient(LoaderOptions{}); c != nil || err != nil {
		t.Errorf("no TLS: %v, %v; want plain HTTP", c, err)
	}
}
