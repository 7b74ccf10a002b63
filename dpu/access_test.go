package dpu

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/testutil"
)

// startAgent runs an agent on loopback ports with cfg's agent section
// completed, until the test ends.
func startAgent(t *testing.T, ac AgentConfig) *Agent {
	t.Helper()
	return startAgentWith(t, ac, nil)
}

// startAgentWith is startAgent with the rest of the configuration set by
// more (nil: nothing more).
func startAgentWith(t *testing.T, ac AgentConfig, more func(*Config)) *Agent {
	t.Helper()
	ac.Shm = Off
	defString(&ac.TCP, "127.0.0.1:0")
	defString(&ac.Mgmt, "127.0.0.1:0")
	if ac.StateDir == "" {
		ac.StateDir = t.TempDir()
	}
	cfg := Config{Agent: ac, RESP: RESPConfig{Addr: "127.0.0.1:0"}, UDP: UDPConfig{Addr: Off}}
	if more != nil {
		more(&cfg)
	}
	return runAgent(t, cfg)
}

// runAgent runs an agent on cfg until the test ends, once it is ready.
func runAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	}
	return a
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// TestMgmtRoutesNeedToken walks every route the agent registered (a route
// added later without a check fails here): without the token, with a
// wrong one or another scheme, each answers 401 before its handler runs;
// with the token none does. Routes opened with --mgmt-open answer without
// it.
func TestMgmtRoutesNeedToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	a := startAgent(t, AgentConfig{TokenFile: tokenFile, MgmtOpen: "healthz"})
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("the token file was not created: %v", err)
	}
	if fi, _ := os.Stat(tokenFile); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	good := "Bearer " + strings.TrimSpace(string(token))
	patterns := a.mux.Patterns()
	for _, want := range []string{"POST /v1/poweroff", "GET /v1/status", "GET /metrics", "GET /v1/acl", "DELETE /v1/acl", "GET /v1/xdp/samples", "POST /v1/peers/test"} {
		if !slices.Contains(patterns, want) {
			t.Fatalf("route %q not registered (have %v): the table would not cover it", want, patterns)
		}
	}
	h := a.guard.wrap(a.mux)
	a.PowerOff = func() { t.Error("poweroff ran") }
	i := 0
	for _, p := range patterns {
		method, path, _ := strings.Cut(p, " ")
		path = wildcard.ReplaceAllString(path, "x")
		open := p == "GET /healthz" || p == "GET /readyz"
		for _, c := range []struct {
			name, auth string
			refused    bool
		}{
			{"no token", "", !open},
			{"wrong token", "Bearer " + strings.Repeat("0", 64), !open},
			{"token as basic", "Basic " + strings.TrimPrefix(good, "Bearer "), !open},
			{"token prefix", good[:len(good)-1], !open},
		} {
			r := httptest.NewRequest(method, path, nil)
			r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", i) // a source per request: the limiter stays out of it
			i++
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if got := w.Code == http.StatusUnauthorized; got != c.refused {
				t.Errorf("%s, %s: %d %q", p, c.name, w.Code, w.Body.String())
			}
		}
		if p == "POST /v1/poweroff" || strings.HasPrefix(p, "POST /v1/debug/") {
			continue // with the token they would act
		}
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("Authorization", good)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusUnauthorized || w.Code == http.StatusTooManyRequests {
			t.Errorf("%s with the token: %d %q", p, w.Code, w.Body.String())
		}
	}
	// Over the network, through the client hecctl uses.
	m := host.NewMgmt(a.Addr("mgmt"))
	if _, err := m.Status(context.Background()); !errors.Is(err, host.ErrDenied) {
		t.Fatalf("status without the token: %v", err)
	}
	if err := m.Ready(context.Background()); err != nil {
		t.Fatalf("readyz is open (--mgmt-open healthz): %v", err)
	}
	m.Token = strings.TrimSpace(string(token))
	st, err := m.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Access.Token || !slices.Equal(st.Access.MgmtOpen, []string{"healthz"}) {
		t.Fatalf("status access %+v", st.Access)
	}
}

// TestMgmtFailuresLimited: a brute-force loop from one address gets
// failBurst answers, then one per failEvery; the right token is refused
// too while the address is limited; another address is not held back.
func TestMgmtFailuresLimited(t *testing.T) {
	g := newMgmtGuard("the-right-token-0123", false, nil, newLimitedLog(slog.New(slog.DiscardHandler)))
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	mux := newMux()
	mux.HandleFunc("GET /x", func(w http.ResponseWriter, r *http.Request) {})
	h := g.wrap(mux)
	try := func(src, token string) int {
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = src + ":5555"
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	codes := map[int]int{}
	for range 1000 {
		codes[try("198.51.100.7", "guess")]++
	}
	if codes[http.StatusUnauthorized] != failBurst || codes[http.StatusTooManyRequests] != 1000-failBurst {
		t.Fatalf("1000 guesses at once: %v, want %d refused as wrong and the rest limited", codes, failBurst)
	}
	if c := try("198.51.100.7", "the-right-token-0123"); c != http.StatusTooManyRequests {
		t.Fatalf("the right token from a limited address: %d", c)
	}
	if c := try("198.51.100.8", "the-right-token-0123"); c != http.StatusOK {
		t.Fatalf("another address: %d", c)
	}
	now = now.Add(3 * failEvery)
	clear(codes)
	for range 100 {
		codes[try("198.51.100.7", "guess")]++
	}
	if codes[http.StatusUnauthorized] != 3 {
		t.Fatalf("after 3 intervals: %v, want 3 more guesses", codes)
	}
	if got := len(g.sources); got > maxSources {
		t.Fatalf("%d sources remembered", got)
	}
	for i := range 3 * maxSources { // a spray of addresses stays bounded
		try(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String(), "guess")
	}
	if got := len(g.sources); got > maxSources {
		t.Fatalf("%d sources remembered after a spray", got)
	}
}

// TestExposedListenersNeedCredentials: a listener beyond loopback without
// a token is refused at start, naming the flag; --insecure serves it and
// says so in the status.
func TestExposedListenersNeedCredentials(t *testing.T) {
	for _, c := range []struct {
		name string
		ac   AgentConfig
		resp string
		flag string
	}{
		{"mgmt", AgentConfig{Mgmt: "0.0.0.0:0", TCP: Off}, "127.0.0.1:0", "--mgmt"},
		{"tcp", AgentConfig{Mgmt: Off, TCP: "0.0.0.0:0"}, "127.0.0.1:0", "--tcp"},
		{"resp", AgentConfig{Mgmt: Off, TCP: Off}, "0.0.0.0:0", "--resp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.ac.Shm, c.ac.StateDir = Off, t.TempDir()
			a, err := New(Config{Agent: c.ac, RESP: RESPConfig{Addr: c.resp}, UDP: UDPConfig{Addr: Off}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			err = a.Run(context.Background())
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), "--insecure") {
				t.Fatalf("started without credentials: %v", err)
			}
			c.ac.Insecure = true
			a = runAgent(t, Config{Agent: c.ac, RESP: RESPConfig{Addr: c.resp}, UDP: UDPConfig{Addr: Off}})
			if got := a.Status().Access.Insecure; !slices.Equal(got, []string{c.name}) {
				t.Fatalf("status lists %v as insecure", got)
			}
		})
	}
}

// TestTCPHandoffAuthenticates: with a token the TCP handoff serves only a
// host that proves it. Random bytes instead of the handshake, a host
// without the token and one with a wrong token are refused with
// StatusDenied; a host with it is served, and still is after those.
func TestTCPHandoffAuthenticates(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	a := startAgent(t, AgentConfig{TokenFile: tokenFile})
	b, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(b))
	target := "tcp://" + a.Addr("tcp")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Garbage, before the handshake: the agent closes the connection.
	nc, err := net.Dial("tcp", a.Addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte(strings.Repeat("\x00garbage\xff", 20)))
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if rest, _ := io.ReadAll(nc); len(rest) != wire.AuthChallengeSize {
		t.Fatalf("after garbage the agent sent %d bytes, want its challenge (%d) and nothing more", len(rest), wire.AuthChallengeSize)
	}
	nc.Close()

	// Garbage after a good handshake: the frame reader refuses it and the
	// agent closes that connection.
	nc, err = net.Dial("tcp", a.Addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.AuthHost(nc, []byte(token)); err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(i*7919 + i>>3)
	}
	nc.Write(junk)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(nc); errors.Is(err, os.ErrDeadlineExceeded) { // EOF or a reset: closed
		t.Fatalf("after garbage past the handshake the agent did not close: %v", err)
	}
	nc.Close()

	c, err := host.Dial(ctx, target)
	if err == nil {
		err = c.Ping(ctx)
		c.Close()
	}
	if !errors.Is(err, wire.StatusDenied) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("a host without the token: %v", err)
	}
	if _, err := host.Dial(ctx, target, host.WithToken(strings.Repeat("f", len(token)))); !errors.Is(err, wire.StatusDenied) {
		t.Fatalf("a host with a wrong token: %v", err)
	}
	c, err = host.Dial(ctx, target, host.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 10 {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := c.Checksum(ctx, make([]byte, 64<<10))
	if err != nil || sum == 0 {
		t.Fatalf("checksum over the authenticated handoff: %#x %v", sum, err)
	}
}

// TestRESPTakesToken: with a token and no RESP password of its own, RESP
// answers NOAUTH before AUTH, WRONGPASS to a wrong one, and serves after
// AUTH TOKEN or AUTH default TOKEN.
func TestRESPTakesToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	a := startAgent(t, AgentConfig{TokenFile: tokenFile})
	b, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(b))
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: a.Addr("resp"), MaxRetries: -1})
	defer rc.Close()
	if err := rc.Set(ctx, "a", "b", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("SET before AUTH: %v", err)
	}
	for _, c := range []struct {
		name string
		o    redis.Options
		ok   bool
	}{
		{"wrong", redis.Options{Password: "nope"}, false},
		{"legacy", redis.Options{Password: token}, true},
		{"acl", redis.Options{Username: "default", Password: token}, true},
		{"other user", redis.Options{Username: "root", Password: token}, false},
	} {
		c.o.Addr, c.o.MaxRetries = a.Addr("resp"), -1
		cl := redis.NewClient(&c.o)
		err := cl.Set(ctx, "k", "v", 0).Err()
		cl.Close()
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "WRONGPASS")) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestMgmtMutualTLS: with --mgmt-cert/--mgmt-key/--mgmt-client-ca the API
// is HTTPS; a client certificate from the CA admits (no token), one from
// another CA fails the handshake, none gets 401, plain HTTP gets nothing.
func TestMgmtMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ours, theirs := testutil.NewCA(t, dir, "ours"), testutil.NewCA(t, dir, "theirs")
	srvCrt, srvKey := ours.Leaf(t, "agent")
	okCrt, okKey := ours.Leaf(t, "operator")
	badCrt, badKey := theirs.Leaf(t, "intruder")
	a := startAgent(t, AgentConfig{MgmtCert: srvCrt, MgmtKey: srvKey, MgmtClientCA: filepath.Join(dir, "ours.crt")})
	ctx := context.Background()
	client := func(crt, key string) *host.Mgmt {
		tc, err := host.ClientTLS(filepath.Join(dir, "ours.crt"), crt, key)
		if err != nil {
			t.Fatal(err)
		}
		return &host.Mgmt{Addr: a.Addr("mgmt"), TLS: tc}
	}
	st, err := client(okCrt, okKey).Status(ctx)
	if err != nil {
		t.Fatalf("a certificate from the client CA: %v", err)
	}
	if !st.Access.MgmtTLS || !st.Access.MgmtClientCerts || st.Access.Token {
		t.Fatalf("status access %+v", st.Access)
	}
	// Go's client does not offer a certificate the agent's CA list does
	// not name: refused as without one.
	if _, err := client(badCrt, badKey).Status(ctx); !errors.Is(err, host.ErrDenied) {
		t.Fatalf("a certificate from another CA: %v, want 401", err)
	}
	// One offered anyway fails the handshake.
	forced := client("", "")
	bad, err := tls.LoadX509KeyPair(badCrt, badKey)
	if err != nil {
		t.Fatal(err)
	}
	forced.TLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &bad, nil }
	if _, err := forced.Status(ctx); err == nil || errors.Is(err, host.ErrDenied) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate from another CA, offered: %v, want a failed handshake", err)
	}
	if _, err := client("", "").Status(ctx); !errors.Is(err, host.ErrDenied) {
		t.Fatalf("no certificate: %v, want 401", err)
	}
	if _, err := host.NewMgmt(a.Addr("mgmt")).Status(ctx); err == nil {
		t.Fatal("plain HTTP to the HTTPS API answered")
	}
	// The agent still serves the good client after those.
	if err := client(okCrt, okKey).Ready(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRegionFileIsTheAgents: a region file made beforehand with a wide
// mode is the agent's, 0600, once it serves it.
func TestRegionFileIsTheAgents(t *testing.T) {
	shm := filepath.Join(t.TempDir(), "region")
	if err := os.WriteFile(shm, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shm, 0o666)
	runAgent(t, Config{Agent: AgentConfig{Shm: shm, RegionSize: 1 << 20, QueuePairs: 1, TCP: Off, Mgmt: Off, StateDir: t.TempDir()},
		RESP: RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off}})
	fi, err := os.Stat(shm)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("region file mode %v, want 0600", fi.Mode().Perm())
	}
}
