package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/api"
)

// resolve fills a.agent and a.mgmt so that one flag names one agent:
// --agent alone implies its management address (a VM's or a cluster
// node's from their records; otherwise the port 10 below a TCP target's,
// as in every layout hecd ships), --mgmt alone implies its agent the same
// way, and neither means the local agent's defaults.
func (a *app) resolve() error {
	agent, mgmt := a.agentFlag, a.mgmtFlag
	if agent != "" {
		t, err := parseTarget(agent)
		if err != nil {
			return usageError{err}
		}
		agent = t
	}
	switch {
	case agent == "" && mgmt == "":
		agent, mgmt = host.DefaultShm, api.DefaultMgmt
	case mgmt == "":
		mgmt = mgmtFor(agent)
	case agent == "":
		agent = agentFor(mgmt)
	}
	if _, _, err := net.SplitHostPort(mgmt); err != nil {
		return usageError{fmt.Errorf("--mgmt %q: want HOST:PORT", mgmt)}
	}
	a.agent, a.mgmt = agent, mgmt
	tok, err := a.token()
	if err != nil {
		return err
	}
	a.tok = tok
	if a.caFlag != "" || a.certFlag != "" || a.keyFlag != "" {
		if a.tls, err = host.ClientTLS(a.caFlag, a.certFlag, a.keyFlag); err != nil {
			return usageError{fmt.Errorf("--mgmt-ca, --mgmt-cert, --mgmt-key: %w", err)}
		}
	}
	return nil
}

// parseTarget checks an --agent value and returns it as a URL.
func parseTarget(s string) (string, error) {
	t := host.ParseTarget(s)
	scheme, rest, _ := strings.Cut(t, "://")
	switch scheme {
	case "shm":
		if !strings.HasPrefix(rest, "/") {
			return "", fmt.Errorf("--agent %q: a region is an absolute path (shm:///dev/shm/NAME)", s)
		}
		return t, nil
	case "tcp", "rdma":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", fmt.Errorf("--agent %q: want shm:///dev/shm/NAME, tcp://HOST:PORT, rdma://HOST:PORT, a path or HOST:PORT", s)
		}
		return t, nil
	}
	return "", fmt.Errorf("--agent %q: unknown scheme %q (shm, tcp or rdma)", s, scheme)
}

// records are the agents hecctl knows of: VMs it booted, nodes of test
// clusters.
type record struct{ agent, tcp, mgmt, tokenFile string }

func records() []record {
	var out []record
	for _, vm := range qemu.List() {
		out = append(out, record{agent: vm.Agent, tcp: "tcp://" + vm.TCP, mgmt: vm.Mgmt, tokenFile: vm.TokenFile})
	}
	for _, st := range cluster.List() {
		for _, n := range st.Nodes {
			out = append(out, record{agent: n.Agent(), tcp: "tcp://" + n.TCP(), mgmt: n.Mgmt(), tokenFile: st.Token})
		}
	}
	return out
}

// token is the operator's token for the resolved agent: --token-file
// (or $HEC_TOKEN_FILE), $HEC_TOKEN, else the record of the VM or cluster
// node hecctl started there; "" when none applies.
func (a *app) token() (string, error) {
	file := a.tokenFlag
	if file == "" {
		if t := strings.TrimSpace(os.Getenv("HEC_TOKEN")); t != "" {
			return t, nil
		}
		for _, r := range records() {
			if r.mgmt == a.mgmt || r.agent == a.agent || r.tcp == a.agent {
				file = r.tokenFile
				break
			}
		}
		if file == "" {
			return "", nil
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usageError{fmt.Errorf("--token-file: %w", err)}
	}
	return strings.TrimSpace(string(b)), nil
}

func mgmtFor(agent string) string {
	for _, r := range records() {
		if r.agent == agent || r.tcp == agent {
			return r.mgmt
		}
	}
	if host, port, ok := tcpTarget(agent); ok {
		if p, err := strconv.Atoi(port); err == nil && p > 10 {
			return net.JoinHostPort(host, strconv.Itoa(p-(api.PortTCP-api.PortMgmt)))
		}
	}
	return api.DefaultMgmt
}

func agentFor(mgmt string) string {
	for _, r := range records() {
		if r.mgmt == mgmt {
			return r.agent
		}
	}
	if mgmt == api.DefaultMgmt {
		return host.DefaultShm
	}
	h, port, err := net.SplitHostPort(mgmt)
	if p, perr := strconv.Atoi(port); err == nil && perr == nil {
		return "tcp://" + net.JoinHostPort(h, strconv.Itoa(p+(api.PortTCP-api.PortMgmt)))
	}
	return host.DefaultShm
}

func tcpTarget(t string) (string, string, bool) {
	rest, ok := strings.CutPrefix(t, "tcp://")
	if !ok {
		return "", "", false
	}
	h, p, err := net.SplitHostPort(rest)
	return h, p, err == nil
}

// client is the management API client of the resolved agent, with its
// token.
func (a *app) client() *host.Mgmt {
	m := host.NewMgmt(a.mgmt)
	m.Token, m.TLS = a.tok, a.tls
	return m
}

// dial attaches to the resolved agent's handoff.
func (a *app) dial(ctx context.Context) (*host.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := host.Dial(dctx, a.agent, host.WithToken(a.tok))
	if err != nil {
		return nil, unreachable{target: a.agent, err: err}
	}
	return c, nil
}

// unreachable is a failure to reach the agent's handoff at target.
type unreachable struct {
	target string
	err    error
}

func (e unreachable) Error() string { return fmt.Sprintf("no agent at %s: %v", e.target, e.err) }
func (e unreachable) Unwrap() error { return e.err }

func hostOf(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func portOf(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
