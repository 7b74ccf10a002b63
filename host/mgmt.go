package host

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/shared/trace"
)

// ErrRefused wraps an answer of the management API other than success:
// the agent was reached and said no (a bad request, a service it does not
// serve).
var ErrRefused = errors.New("host: refused by the agent")

// ErrUnreachable wraps a failure to reach the management API at all.
var ErrUnreachable = errors.New("host: agent unreachable")

// Mgmt is a typed client of an agent's management API (package api has
// the bodies). hecctl, the bench and the tests use it.
type Mgmt struct {
	// Addr is the API's HOST:PORT.
	Addr string
	// HTTP is the client used (default http.DefaultClient).
	HTTP *http.Client
	// Token is the operator's bearer token, sent with every request
	// ("" sends none: an agent with a token then answers only the routes
	// it serves openly).
	Token string
	// TLS, when set, makes the API HTTPS with this client configuration
	// (the agent's CA in RootCAs; a client certificate for mutual TLS).
	// Ignored when HTTP is set: that client's transport is used.
	TLS *tls.Config

	mu      sync.Mutex
	tlsHTTP *http.Client
}

// ErrDenied wraps an answer of 401 or 429: the agent wants the operator's
// token, another one, or fewer failed attempts from this address.
var ErrDenied = errors.New("host: not authenticated")

// NewMgmt returns a client of the management API at addr ("" is the
// local agent's default).
func NewMgmt(addr string) *Mgmt {
	if addr == "" {
		addr = api.DefaultMgmt
	}
	return &Mgmt{Addr: addr}
}

func (m *Mgmt) client() *http.Client {
	if m.HTTP != nil {
		return m.HTTP
	}
	if m.TLS != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.tlsHTTP == nil {
			m.tlsHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: m.TLS}}
		}
		return m.tlsHTTP
	}
	return http.DefaultClient
}

func (m *Mgmt) url(path string) string {
	if m.TLS != nil {
		return "https://" + m.Addr + path
	}
	return "http://" + m.Addr + path
}

// ClientTLS is the TLS configuration of a client of an agent whose
// certificate caFile's CA signed (PEM; "" trusts the system's roots),
// presenting certFile and keyFile when given (mutual TLS).
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA %s: no PEM certificate in it", caFile)
		}
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Do sends a request to path; an answer other than 2xx is an error wrapping
// ErrRefused with the agent's message. The caller closes the body.
func (m *Mgmt) Do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := m.request(ctx, method, path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := m.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("management API at %s: %w: %w", m.Addr, ErrUnreachable, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, refusal(method, path, resp)
	}
	return resp, nil
}

// refusal is the error for an answer other than 2xx, with the agent's
// message.
func refusal(method, path string, resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusTooManyRequests {
		return fmt.Errorf("%s %s: %s: %s: %w: %w", method, path, resp.Status, strings.TrimSpace(string(msg)), ErrDenied, ErrRefused)
	}
	return fmt.Errorf("%s %s: %s: %s: %w", method, path, resp.Status, strings.TrimSpace(string(msg)), ErrRefused)
}

// request is a request to path, with the token.
func (m *Mgmt) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, m.url(path), body)
	if err != nil {
		return nil, err
	}
	if m.Token != "" {
		req.Header.Set("Authorization", "Bearer "+m.Token)
	}
	return req, nil
}

func (m *Mgmt) getJSON(ctx context.Context, path string, v any) error {
	resp, err := m.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decode: %w", path, err)
	}
	return nil
}

// Status is GET /v1/status.
func (m *Mgmt) Status(ctx context.Context) (api.Status, error) {
	var st api.Status
	return st, m.getJSON(ctx, "/v1/status", &st)
}

// Coll is GET /v1/coll: the agent's communicators' flight recorders.
func (m *Mgmt) Coll(ctx context.Context) ([]api.CollComm, error) {
	var comms []api.CollComm
	return comms, m.getJSON(ctx, "/v1/coll", &comms)
}

// Ready reports whether GET /readyz answers 200 (nil) or why not.
func (m *Mgmt) Ready(ctx context.Context) error {
	resp, err := m.Do(ctx, http.MethodGet, "/readyz", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Metrics returns the Prometheus text exposition of GET /metrics.
func (m *Mgmt) Metrics(ctx context.Context) (string, error) {
	resp, err := m.Do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Metric returns the value of one series of GET /metrics, named as the
// exposition writes it (`hec_ops_total{op="ping"}`); false when absent.
func (m *Mgmt) Metric(ctx context.Context, series string) (float64, bool, error) {
	text, err := m.Metrics(ctx)
	if err != nil {
		return 0, false, err
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			return v, err == nil, err
		}
	}
	return 0, false, sc.Err()
}

// Peers is GET /v1/peers.
func (m *Mgmt) Peers(ctx context.Context) ([]api.PeerStatus, error) {
	var ps []api.PeerStatus
	return ps, m.getJSON(ctx, "/v1/peers", &ps)
}

// TestPeer is POST /v1/peers/test: round trips and a bulk transfer to a
// peer. A failed test is an answer (its Error says why), not an error.
func (m *Mgmt) TestPeer(ctx context.Context, peer uint32, pings int, bytes int64) (api.LinkTest, error) {
	var r api.LinkTest
	path := fmt.Sprintf("/v1/peers/test?peer=%d&pings=%d&bytes=%d", peer, pings, bytes)
	req, err := m.request(ctx, http.MethodPost, path, nil)
	if err != nil {
		return r, err
	}
	resp, err := m.client().Do(req)
	if err != nil {
		return r, fmt.Errorf("management API at %s: %w: %w", m.Addr, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadGateway {
		return r, fmt.Errorf("POST %s: %s: %s: %w", path, resp.Status, strings.TrimSpace(string(body)), ErrRefused)
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("POST %s: decode: %w", path, err)
	}
	return r, nil
}

// XDP is GET /v1/xdp with the top talkers.
func (m *Mgmt) XDP(ctx context.Context, talkers int) (api.XDPStatus, error) {
	var st api.XDPStatus
	return st, m.getJSON(ctx, fmt.Sprintf("/v1/xdp?talkers=%d", talkers), &st)
}

// Samples streams GET /v1/xdp/samples to f until the agent ends the
// stream (the query's time or count) or f returns false.
func (m *Mgmt) Samples(ctx context.Context, q api.SampleQuery, f func(api.XDPSample) bool) error {
	v := url.Values{}
	if q.Every > 0 {
		v.Set("every", strconv.FormatUint(uint64(q.Every), 10))
	}
	if q.Snap > 0 {
		v.Set("snap", strconv.FormatUint(uint64(q.Snap), 10))
	}
	if q.Max > 0 {
		v.Set("max", strconv.FormatUint(uint64(q.Max), 10))
	}
	if q.Seconds > 0 {
		v.Set("seconds", strconv.FormatFloat(q.Seconds, 'f', -1, 64))
	}
	if q.Classes != "" {
		v.Set("classes", q.Classes)
	}
	resp, err := m.Do(ctx, http.MethodGet, "/v1/xdp/samples?"+v.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var s api.XDPSample
		if err := dec.Decode(&s); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("samples: %w", err)
		}
		if !f(s) {
			return nil
		}
	}
}

// ACL is GET /v1/acl.
func (m *Mgmt) ACL(ctx context.Context) (api.ACL, error) {
	var a api.ACL
	return a, m.getJSON(ctx, "/v1/acl", &a)
}

// ACLAdd is POST /v1/acl.
func (m *Mgmt) ACLAdd(ctx context.Context, r api.ACLRule) error {
	resp, err := m.Do(ctx, http.MethodPost, "/v1/acl", r)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// ACLDel is DELETE /v1/acl?prefix=P.
func (m *Mgmt) ACLDel(ctx context.Context, prefix string) error {
	resp, err := m.Do(ctx, http.MethodDelete, "/v1/acl?prefix="+url.QueryEscape(prefix), nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// PowerOff is POST /v1/poweroff (an agent under process 1 of its machine).
func (m *Mgmt) PowerOff(ctx context.Context) error {
	resp, err := m.Do(ctx, http.MethodPost, "/v1/poweroff", nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// WaitReady polls /readyz until it answers 200 or ctx ends.
func (m *Mgmt) WaitReady(ctx context.Context) error {
	for {
		err := m.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent at %s not ready: %w", m.Addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ECRepair is POST /v1/ec/repair: the agent repairs object name, or every
// object with all, and says what it did for each.
func (m *Mgmt) ECRepair(ctx context.Context, name string, all bool) ([]object.RepairResult, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	} else {
		q.Set("name", name)
	}
	resp, err := m.Do(ctx, http.MethodPost, "/v1/ec/repair?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res []object.RepairResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("POST /v1/ec/repair: decode: %w", err)
	}
	return res, nil
}

// Update is POST /v1/update: it uploads the agent bundle in dir (package
// bundle's archive, streamed) and returns the agent's answer; with dryRun
// the agent only verifies it. sent, when not nil, is called with the
// bytes sent so far.
func (m *Mgmt) Update(ctx context.Context, dir string, dryRun bool, sent func(n int64)) (api.UpdateReply, error) {
	var reply api.UpdateReply
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(bundle.Pack(pw, dir)) }()
	defer pr.Close()
	var body io.Reader = pr
	if sent != nil {
		body = &countingReader{r: pr, f: sent}
	}
	path := "/v1/update"
	if dryRun {
		path += "?dry_run=1"
	}
	req, err := m.request(ctx, http.MethodPost, path, body)
	if err != nil {
		return reply, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := m.client().Do(req)
	if err != nil {
		return reply, fmt.Errorf("management API at %s: %w: %w", m.Addr, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return reply, refusal(http.MethodPost, "/v1/update", resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return reply, fmt.Errorf("POST /v1/update: decode: %w", err)
	}
	return reply, nil
}

// WaitUpdate polls the agent's status, through the restart an update
// makes, until the update to version is committed or rolled back (or ctx
// ends); it returns the outcome and the status then.
func (m *Mgmt) WaitUpdate(ctx context.Context, version string) (*api.UpdateOutcome, api.Status, error) {
	var last error
	for {
		st, err := m.Status(ctx)
		switch {
		case err != nil:
			last = err // restarting
		case st.Update == nil:
			last = errors.New("the agent reports no slots")
		case st.Update.Last != nil && st.Update.Last.Version == version && st.Update.Last.Result != api.UpdateTrying:
			return st.Update.Last, st, nil
		default:
			last = fmt.Errorf("%s: %s", version, api.UpdateTrying)
		}
		select {
		case <-ctx.Done():
			return nil, st, fmt.Errorf("no commit or rollback of %s: %w (last: %v)", version, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

type countingReader struct {
	r io.Reader
	n int64
	f func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.f(c.n)
	return n, err
}

// Trace records the agent's ops for d (GET /v1/trace) and returns their
// spans, in the agent's clock (ClockOffset).
func (m *Mgmt) Trace(ctx context.Context, d time.Duration) (trace.Reply, error) {
	var r trace.Reply
	return r, m.getJSON(ctx, "/v1/trace?for="+url.QueryEscape(d.String()), &r)
}

// ClockOffset measures how far the agent's clock is ahead of this
// process's: of n round trips (GET /v1/clock), the shortest's, taking the
// agent's reading as made halfway through it. rtt bounds the error.
func (m *Mgmt) ClockOffset(ctx context.Context, n int) (offset, rtt time.Duration, err error) {
	rtt = -1
	for range max(n, 1) {
		var r trace.Reply
		t0 := time.Now()
		if err := m.getJSON(ctx, "/v1/clock", &r); err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		if d := t1.Sub(t0); rtt < 0 || d < rtt {
			rtt = d
			offset = time.Duration(r.Now - t0.UnixNano() - int64(d)/2)
		}
	}
	return offset, rtt, nil
}
