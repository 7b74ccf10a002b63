package dpu

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/shared/durable"
	"github.com/hecsys/hec/shared/wire"
)

// Access. The operator's credential is one bearer token, kept in a file
// (--token-file; created, 0600, with 32 random bytes when missing — as
// process 1 the agent keeps it on the state disk, so it outlives
// reboots). When a token is configured:
//
//   - the management API answers only requests that carry it
//     ("Authorization: Bearer TOKEN"), except the read-only routes the
//     operator opens (--mgmt-open healthz,metrics); a wrong or missing
//     token gets 401, and a source that keeps failing gets 429: failures
//     are limited to failBurst, then one per failEvery, per source
//     address;
//   - the TCP handoff authenticates each connection (wire.Authenticate)
//     before it reads a descriptor;
//   - RESP takes it as the default user's password when no --resp-password
//     is given.
//
// Without a token, a listener bound beyond loopback is refused at start
// unless --insecure says the operator means it (logged at every start and
// reported in /v1/status). The shared-memory region is created 0600 by
// the agent's user: only that user (and root) can attach.

// Mgmt-open names and the routes they open.
var openRoutes = map[string][]string{
	"healthz": {"GET /healthz", "GET /readyz"},
	"metrics": {"GET /metrics"},
}

const (
	failBurst  = 10          // failed attempts a source may make at once
	failEvery  = time.Second // then one more per interval
	maxSources = 4096        // sources remembered; the fullest are let go first
	refuseLog  = time.Minute // a refusal is logged once per source per interval
)

// Mux is the management API's router: an http.ServeMux that remembers the
// patterns registered, so tests can walk every route.
type Mux struct {
	*http.ServeMux
	mu       sync.Mutex
	patterns []string
}

func newMux() *Mux { return &Mux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern.
func (m *Mux) Handle(pattern string, h http.Handler) {
	m.mu.Lock()
	m.patterns = append(m.patterns, pattern)
	m.mu.Unlock()
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers f for pattern.
func (m *Mux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// Patterns returns the patterns registered, in order.
func (m *Mux) Patterns() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.patterns)
}

// loadToken reads the token in path, creating the file with a fresh one
// when it does not exist. created says it was made now.
func loadToken(path string) (token string, created bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if token, err = wire.NewToken(); err != nil {
			return "", false, fmt.Errorf("--token-file %s: %w", path, err)
		}
		if err := writeFileSync(path, []byte(token+"\n"), 0o600); err != nil {
			return "", false, fmt.Errorf("--token-file %s: %w", path, err)
		}
		return token, true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("--token-file %s: %w", path, err)
	}
	token = strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", false, fmt.Errorf("--token-file %s: a token of %d characters: want at least 16: %w", path, len(token), ErrConfig)
	}
	return token, false, nil
}

// writeFileSync makes path's directory (0700) and writes data to path
// durably (durable.WriteFile).
func writeFileSync(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return durable.WriteFile(path, data, mode)
}

// exposed reports whether a listener address reaches beyond this
// machine: any address but a loopback one (or localhost).
func exposed(addr string) bool {
	if addr == "" || addr == Off {
		return false
	}
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if h == "localhost" {
		return false
	}
	ip := net.ParseIP(h)
	return ip == nil || !ip.IsLoopback()
}

// mgmtGuard checks the management API's requests against the token.
type mgmtGuard struct {
	sum     [sha256.Size]byte // of the token
	token   bool              // a token admits
	certs   bool              // a verified client certificate admits
	open    map[string]bool   // patterns served without the token
	log     *limitedLog
	refused *prometheus.CounterVec

	mu      sync.Mutex
	sources map[string]*failBucket
	now     func() time.Time
}

// failBucket holds a source's allowance of failed attempts.
type failBucket struct {
	left   float64
	at     time.Time
	logged time.Time
}

// newMgmtGuard checks for token ("" none) and, with certs, admits a
// verified client certificate; with neither, everything is open.
func newMgmtGuard(token string, certs bool, open []string, log *limitedLog) *mgmtGuard {
	g := &mgmtGuard{token: token != "", certs: certs, open: map[string]bool{}, log: log, sources: map[string]*failBucket{}, now: time.Now,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hec_mgmt_refused_total",
			Help: "Management requests refused, by reason (missing or wrong token; limited: the source failed too often).",
		}, []string{"reason"})}
	g.sum = sha256.Sum256([]byte(token))
	for _, name := range open {
		for _, p := range openRoutes[name] {
			g.open[p] = true
		}
	}
	for _, r := range []string{"missing", "wrong", "limited"} {
		g.refused.WithLabelValues(r)
	}
	return g
}

// enabled reports whether any credential is asked for.
func (g *mgmtGuard) enabled() bool { return g.token || g.certs }

// wrap returns mux behind the check.
func (g *mgmtGuard) wrap(mux *Mux) http.Handler {
	if !g.enabled() {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); g.open[pattern] {
			mux.ServeHTTP(w, r)
			return
		}
		if g.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			mux.ServeHTTP(w, r) // a client certificate our CA signed
			return
		}
		if err := g.check(r); err != nil {
			if errors.Is(err, errLimited) {
				w.Header().Set("Retry-After", strconv.Itoa(int(failEvery/time.Second)))
				http.Error(w, err.Error(), http.StatusTooManyRequests)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="hecd"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

var errLimited = errors.New("too many failed attempts from this address: one more per second")

// check returns why r may not be served (nil: it may). A source out of
// failed attempts is refused before its token is looked at.
func (g *mgmtGuard) check(r *http.Request) error {
	src := r.RemoteAddr
	if h, _, err := net.SplitHostPort(src); err == nil {
		src = h
	}
	reason := "missing"
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && g.token && strings.EqualFold(scheme, "Bearer") {
		sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
		reason = "wrong"
		if subtle.ConstantTimeCompare(sum[:], g.sum[:]) == 1 {
			reason = ""
		}
	}
	now := g.now()
	g.mu.Lock()
	b := g.bucket(src, now)
	switch {
	case b.left < 1:
		reason = "limited"
	case reason != "":
		b.left--
	}
	logIt := reason != "" && now.Sub(b.logged) >= refuseLog
	if logIt {
		b.logged = now
	}
	g.mu.Unlock()
	if reason == "" {
		return nil
	}
	g.refused.WithLabelValues(reason).Inc()
	if logIt {
		g.log.Log(slog.LevelWarn, "mgmt: request refused", "source", src, "reason", reason,
			"note", "further refusals of this source are counted (hec_mgmt_refused_total), logged again after "+refuseLog.String())
	}
	switch {
	case reason == "limited":
		return errLimited
	case reason == "wrong":
		return errors.New("wrong token")
	case !g.token:
		return errors.New("this request needs a client certificate from the agent's client CA")
	}
	return errors.New("this request needs the operator's token (Authorization: Bearer TOKEN)")
}

// bucket returns src's allowance, refilled to now. With g.mu held.
func (g *mgmtGuard) bucket(src string, now time.Time) *failBucket {
	b := g.sources[src]
	if b == nil {
		if len(g.sources) >= maxSources {
			g.forget(now)
		}
		b = &failBucket{left: failBurst, at: now}
		g.sources[src] = b
	}
	b.left = min(failBurst, b.left+now.Sub(b.at).Seconds()/failEvery.Seconds())
	b.at = now
	return b
}

// forget lets go of the sources whose allowance is full again (or, if
// none is, of half the sources): the map stays bounded under a spray of
// addresses. With g.mu held.
func (g *mgmtGuard) forget(now time.Time) {
	for src, b := range g.sources {
		if b.left+now.Sub(b.at).Seconds()/failEvery.Seconds() >= failBurst {
			delete(g.sources, src)
		}
	}
	for src := range g.sources {
		if len(g.sources) < maxSources/2 {
			break
		}
		delete(g.sources, src)
	}
}

// credentials loads the operator's token and refuses to serve a core
// listener beyond loopback without one (unless --insecure).
func (a *Agent) credentials() error {
	c := &a.cfg.Agent
	if c.TokenFile != "" {
		token, created, err := loadToken(c.TokenFile)
		if err != nil {
			return err
		}
		if created {
			a.log.Info("created the operator's token: the management API, the TCP handoff and RESP require it",
				"file", c.TokenFile, "fetch", "read it from that file (hecctl --token-file FILE, or HEC_TOKEN)")
		}
		a.shared.Token = token
	}
	a.shared.Insecure = c.Insecure
	if c.MgmtCert != "" {
		tc, err := mgmtTLS(c)
		if err != nil {
			return err
		}
		a.mgmtTLS = tc
	}
	a.shared.MgmtCerts = a.mgmtTLS != nil && a.mgmtTLS.ClientCAs != nil
	a.guard = newMgmtGuard(a.shared.Token, a.shared.MgmtCerts, c.mgmtOpen(), a.disp.limited)
	if err := a.shared.checkExposed(a.log, "--mgmt", c.Mgmt, a.guard.enabled()); err != nil {
		return err
	}
	return a.shared.checkExposed(a.log, "--tcp", c.TCP, a.shared.Token != "")
}

// mgmtTLS loads the management API's certificate and, for mutual TLS,
// the CA its clients' certificates must come from.
func mgmtTLS(c *AgentConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.MgmtCert, c.MgmtKey)
	if err != nil {
		return nil, fmt.Errorf("--mgmt-cert %s, --mgmt-key %s: %v: %w", c.MgmtCert, c.MgmtKey, err, ErrConfig)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.MgmtClientCA != "" {
		pem, err := os.ReadFile(c.MgmtClientCA)
		if err != nil {
			return nil, fmt.Errorf("--mgmt-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--mgmt-client-ca %s: no PEM certificate in it: %w", c.MgmtClientCA, ErrConfig)
		}
		// A certificate is optional (the token also admits), but one
		// given must verify: another CA's fails the handshake.
		tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// checkExposed refuses a listener at addr that reaches beyond loopback
// without credentials, unless the operator said --insecure (then it is
// logged, at every start, and listed in /v1/status).
func (s *Shared) checkExposed(log *slog.Logger, flag, addr string, credentials bool) error {
	if credentials || !exposed(addr) {
		return nil
	}
	if !s.Insecure {
		return fmt.Errorf("%s %s reaches beyond this machine without credentials: give --token-file FILE (created when missing), bind it to 127.0.0.1, or pass --insecure: %w",
			flag, addr, ErrConfig)
	}
	name := strings.TrimPrefix(flag, "--")
	log.Warn("INSECURE: serving beyond loopback without credentials (--insecure): anyone who can reach this address can use it",
		"listener", name, "addr", addr)
	s.mu.Lock()
	s.insecure = append(s.insecure, name)
	s.mu.Unlock()
	return nil
}

// notServed forgets listener name (a flag without its dashes) among the
// insecure ones: checkExposed let it, but it could not listen, and the
// agent serves on without it.
func (s *Shared) notServed(name string) {
	s.mu.Lock()
	s.insecure = slices.DeleteFunc(s.insecure, func(n string) bool { return n == name })
	s.mu.Unlock()
}

// insecureListeners returns the listeners served beyond loopback without
// credentials.
func (s *Shared) insecureListeners() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.insecure)
}
