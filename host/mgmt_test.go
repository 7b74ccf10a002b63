package host

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hecsys/hec/shared/api"
)

// TestMgmtSendsToken: every method of the client sends the token (a
// method that builds its own request without it fails here); without
// one, each gets ErrDenied from an agent that wants it.
func TestMgmtSendsToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "token, please", http.StatusUnauthorized)
			return
		}
		switch {
		case r.URL.Path == "/metrics":
			w.Write([]byte("hec_x 1\n"))
		case strings.HasPrefix(r.URL.Path, "/v1/xdp/samples"):
		case r.URL.Path == "/v1/peers":
			w.Write([]byte("[]"))
		default:
			w.Write([]byte("{}"))
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	calls := map[string]func(m *Mgmt) error{
		"Status":   func(m *Mgmt) error { _, err := m.Status(ctx); return err },
		"Ready":    func(m *Mgmt) error { return m.Ready(ctx) },
		"Metrics":  func(m *Mgmt) error { _, err := m.Metrics(ctx); return err },
		"Metric":   func(m *Mgmt) error { _, _, err := m.Metric(ctx, "hec_x"); return err },
		"Peers":    func(m *Mgmt) error { _, err := m.Peers(ctx); return err },
		"TestPeer": func(m *Mgmt) error { _, err := m.TestPeer(ctx, 2, 1, 0); return err },
		"XDP":      func(m *Mgmt) error { _, err := m.XDP(ctx, 0); return err },
		"Samples": func(m *Mgmt) error {
			return m.Samples(ctx, api.SampleQuery{}, func(api.XDPSample) bool { return false })
		},
		"ACL":      func(m *Mgmt) error { _, err := m.ACL(ctx); return err },
		"ACLAdd":   func(m *Mgmt) error { return m.ACLAdd(ctx, api.ACLRule{Prefix: "10.0.0.0/8"}) },
		"ACLDel":   func(m *Mgmt) error { return m.ACLDel(ctx, "10.0.0.0/8") },
		"PowerOff": func(m *Mgmt) error { return m.PowerOff(ctx) },
	}
	for name, call := range calls {
		if err := call(&Mgmt{Addr: addr, Token: token}); errors.Is(err, ErrDenied) || err != nil && strings.Contains(err.Error(), "401") {
			t.Errorf("%s with the token: %v", name, err)
		}
		if err := call(&Mgmt{Addr: addr}); err == nil || !errors.Is(err, ErrDenied) && !strings.Contains(err.Error(), "401") {
			t.Errorf("%s without the token: %v, want a refusal", name, err)
		}
	}
}
