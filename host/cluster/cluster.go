package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
	"github.com/hecsys/hec/shared/sysinfo"
	"github.com/hecsys/hec/shared/wire"
)

// Options describe a cluster to make.
type Options struct {
	Name   string // default "hec"; letters and digits, at most 8
	Agents int    // nodes, each a namespace with an agent (1..64)
	// Rates limit links: node index → tc rate ("1gbit", "500mbit"); index
	// 0 applies to every node's link.
	Rates map[int]string
	// HostRail gives every node a second link, eth1 on a second bridge,
	// for its host processes' own traffic (the host rail: HostAddr),
	// rate-limited apart from the agents' link by HostRates (indexed as
	// Rates). A VM's host processes run in the switch, whose address on
	// that bridge they share.
	HostRail  bool
	HostRates map[int]string
	// Membership is "static" (default: each agent gets the member list) or
	// "etcd" (an etcd in the switch namespace; agents register there).
	Membership string
	// VMs of the agents (the last ones) are arm64 VMs booted from Bundle
	// (make image), joined to the bridge through a tap.
	VMs      int
	Bundle   string // default .cache/images/qemu
	Hecd     string // the agent binary (default: hecd beside this program, then PATH)
	StateDir string // default /run/hec/cluster-NAME
	// XDP attaches each agent's XDP fast path to its eth0 in this mode
	// (auto, native or generic); "" leaves it off.
	XDP string
	// Transport carries the agents' peer links: "tcp" (default) or
	// "rdma", over soft-RoCE on each agent's NIC (hecd --rdma-rxe eth0
	// --peer-transport rdma), each agent then serving the handoff over
	// RDMA too (--rdma-listen ADDR:api.PortRDMA: Node.RDMA). The agents in namespaces share this
	// machine's kernel, so rdma wants every agent a VM (VMs = Agents),
	// whose kernels carry soft-RoCE, and an image whose agent was built
	// with RDMA (images.BuildArmAgent).
	Transport string
	// AgentArgs are more hecd flags for every agent (not the VMs).
	AgentArgs []string
	// AgentEnv are more environment variables for every agent (not the
	// VMs), as "NAME=value": GOMAXPROCS=1 gives agents sharing a small
	// machine a core's share each.
	AgentEnv []string
	// AgentCPUs, where it has an entry for node i (AgentCPUs[i-1], not
	// nil), starts node i's agent on those CPUs (not a VM's).
	AgentCPUs [][]int
	// TrustedKey, a file holding a hex ed25519 public key, runs every
	// agent (not the VMs: process 1 is theirs) under its loader, hecd
	// supervise, trusting that key: the agents keep A/B slots in their
	// state and can be flashed (hecctl flash --cluster). LoaderArgs are
	// more loader flags (--gate=10s).
	TrustedKey string
	LoaderArgs []string
	Log        io.Writer
}

// Node is one node of a cluster.
type Node struct {
	Index int    `json:"index"`
	NS    string `json:"netns"`
	Addr  string `json:"addr"` // its address on the cluster's bridge
	PID   int    `json:"pid"`  // its agent, or its VM's QEMU
	Rate  string `json:"rate,omitempty"`
	// HostAddr is the node's address on the host-rail bridge, HostRate
	// that link's limit (Options.HostRail).
	HostAddr string `json:"host_addr,omitempty"`
	HostRate string `json:"host_rate,omitempty"`
	VM       bool   `json:"vm,omitempty"` // an arm64 VM on the bridge; NS is then the switch's
	// TokenFile holds the operator's token its agent requires (the
	// cluster's: every node has the same).
	TokenFile string `json:"token_file,omitempty"`
	// CPUs its agent is started on (Options.AgentCPUs); none: anywhere.
	CPUs []int `json:"cpus,omitempty"`
	// RDMA is the address of its agent's handoff over RDMA (a VM of a
	// cluster whose transport is rdma), "" where it serves none.
	RDMA string `json:"rdma,omitempty"`
}

// Mgmt is the node agent's management address (reachable inside the
// cluster's namespaces only: see Client).
func (n Node) Mgmt() string { return net.JoinHostPort(n.Addr, strconv.Itoa(api.PortMgmt)) }

// Agent is the --agent target of the node's agent: its region, or for a
// VM its TCP handoff.
func (n Node) Agent() string {
	if n.VM {
		return "tcp://" + n.TCP()
	}
	return "shm:///dev/shm/" + n.NS
}

// TCP is the address of the node's TCP handoff.
func (n Node) TCP() string { return net.JoinHostPort(n.Addr, strconv.Itoa(api.PortTCP)) }

// Env is the environment that makes hecctl (and host.Dial users reading
// it) reach the node's agent with no flags.
func (n Node) Env() []string {
	return []string{"HEC_AGENT=" + n.Agent(), "HEC_MGMT=" + n.Mgmt(), "HEC_TOKEN_FILE=" + n.TokenFile}
}

// Token is the operator's token the node's agent requires.
func (n Node) Token() string {
	b, _ := os.ReadFile(n.TokenFile)
	return strings.TrimSpace(string(b))
}

// Client is a client of the node's management API, connecting from
// inside its namespace.
func (n Node) Client() *host.Mgmt {
	return &host.Mgmt{Addr: n.Mgmt(), HTTP: Client(n.NS), Token: n.Token()}
}

// Peer is the node agent's peer address.
func (n Node) Peer() string { return net.JoinHostPort(n.Addr, strconv.Itoa(api.PortPeer)) }

// State is a cluster that is up, as written to its state directory.
type State struct {
	Name       string   `json:"name"`
	Dir        string   `json:"dir"`
	Switch     string   `json:"switch_netns"`
	Subnet     string   `json:"subnet"`
	Membership string   `json:"membership"`
	Etcd       string   `json:"etcd,omitempty"`
	EtcdPID    int      `json:"etcd_pid,omitempty"`
	Key        string   `json:"cluster_key_file"`
	Token      string   `json:"token_file"` // the operator's token, every node's
	XDP        string   `json:"xdp,omitempty"`
	Transport  string   `json:"transport,omitempty"` // the peer links': tcp or rdma
	AgentArgs  []string `json:"agent_args,omitempty"`
	AgentEnv   []string `json:"agent_env,omitempty"`
	TrustedKey string   `json:"trusted_key,omitempty"` // the agents run under hecd supervise, trusting it
	LoaderArgs []string `json:"loader_args,omitempty"`
	Hecd       string   `json:"hecd"` // the agent binary
	Nodes      []Node   `json:"nodes"`
}

const (
	subnetPrefix = "10.77.0." // a private range, only inside the cluster's namespaces
	switchAddr   = subnetPrefix + "254"
	hostPrefix   = "10.78.0." // the host-rail bridge's
	switchHost   = hostPrefix + "254"
)

var validName = regexp.MustCompile(`^[a-z0-9]{1,8}$`)

// DefaultStateDir is where a cluster's state lives.
func DefaultStateDir(name string) string { return filepath.Join("/run/hec", "cluster-"+name) }

func nsName(cluster string, i int) string { return fmt.Sprintf("hec-%s-%d", cluster, i) }
func switchNS(cluster string) string      { return "hec-" + cluster + "-sw" }

func run(log io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Up makes the cluster: namespaces, links, rate limits, etcd when asked,
// and an agent per node, and waits until every agent is ready. On error
// it removes what it made.
func Up(ctx context.Context, o Options) (st *State, err error) {
	if o.Name == "" {
		o.Name = "hec"
	}
	if !validName.MatchString(o.Name) {
		return nil, fmt.Errorf("cluster name %q: want 1 to 8 lower-case letters and digits", o.Name)
	}
	if o.Agents < 1 || o.Agents > 64 {
		return nil, fmt.Errorf("cluster: %d agents: want 1 to 64", o.Agents)
	}
	if o.VMs < 0 || o.VMs > o.Agents {
		return nil, fmt.Errorf("cluster: %d VMs among %d agents", o.VMs, o.Agents)
	}
	if o.Membership == "" {
		o.Membership = "static"
	}
	switch o.Transport {
	case "", "tcp":
		o.Transport = "tcp"
	case "rdma":
		if o.VMs != o.Agents {
			return nil, fmt.Errorf("cluster: peer links over rdma with %d VMs among %d agents: the agents in namespaces share this machine's kernel, which has no soft-RoCE for them; make every agent a VM (--vm %d)", o.VMs, o.Agents, o.Agents)
		}
	default:
		return nil, fmt.Errorf("cluster: transport %q: want tcp or rdma", o.Transport)
	}
	if o.Membership != "static" && o.Membership != "etcd" {
		return nil, fmt.Errorf("cluster: membership %q: want static or etcd", o.Membership)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir(o.Name)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: making network namespaces needs root")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("cluster: %s not found (apt-get install iproute2)", tool)
		}
	}
	hecd, err := FindHecd(o.Hecd)
	if err != nil {
		return nil, err
	}
	if o.TrustedKey != "" {
		if o.TrustedKey, err = filepath.Abs(o.TrustedKey); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(o.TrustedKey)
		if err == nil {
			_, err = bundle.ParsePublicKey(b)
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: trusted key: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, "state.json")); err == nil {
		return nil, fmt.Errorf("cluster %q is up (state in %s): hecctl cluster down first", o.Name, o.StateDir)
	}
	if leftovers := namespaces(o.Name); len(leftovers) > 0 {
		return nil, fmt.Errorf("cluster %q has namespaces left (%s): hecctl cluster down first", o.Name, strings.Join(leftovers, " "))
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, err
	}
	st = &State{Name: o.Name, Dir: o.StateDir, Switch: switchNS(o.Name), Subnet: subnetPrefix + "0/24", Membership: o.Membership, XDP: o.XDP, Transport: o.Transport, AgentArgs: o.AgentArgs, AgentEnv: o.AgentEnv,
		TrustedKey: o.TrustedKey, LoaderArgs: o.LoaderArgs,
		Key: filepath.Join(o.StateDir, "cluster.key"), Token: filepath.Join(o.StateDir, "token")}
	defer func() {
		if err != nil {
			Down(o.Name, o.StateDir, o.Log)
		}
	}()
	var key [32]byte
	rand.Read(key[:])
	if err := os.WriteFile(st.Key, []byte(hex.EncodeToString(key[:])), 0o600); err != nil {
		return nil, err
	}
	token, err := wire.NewToken()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(st.Token, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	// The switch: a namespace holding the bridge.
	sw := st.Switch
	for _, c := range [][]string{
		{"netns", "add", sw},
		{"-n", sw, "link", "set", "lo", "up"},
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "addr", "add", switchAddr + "/24", "dev", "br0"},
		{"-n", sw, "link", "set", "br0", "up"},
	} {
		if err := run(o.Log, "ip", c...); err != nil {
			return nil, err
		}
	}
	if o.HostRail {
		for _, c := range [][]string{
			{"-n", sw, "link", "add", "br1", "type", "bridge"},
			{"-n", sw, "addr", "add", switchHost + "/24", "dev", "br1"},
			{"-n", sw, "link", "set", "br1", "up"},
		} {
			if err := run(o.Log, "ip", c...); err != nil {
				return nil, err
			}
		}
	}
	for i := 1; i <= o.Agents; i++ {
		n := Node{Index: i, NS: nsName(o.Name, i), Addr: subnetPrefix + strconv.Itoa(i)}
		v := "v" + strconv.Itoa(i)
		if i > o.Agents-o.VMs {
			// A VM: its tap on the bridge; QEMU runs in the switch.
			n.VM, n.NS = true, sw
			for _, c := range [][]string{
				{"-n", sw, "tuntap", "add", "dev", v, "mode", "tap"},
				{"-n", sw, "link", "set", v, "master", "br0"},
				{"-n", sw, "link", "set", v, "up"},
			} {
				if err := run(o.Log, "ip", c...); err != nil {
					return nil, err
				}
			}
			if o.HostRail {
				n.HostAddr = switchHost
			}
			st.Nodes = append(st.Nodes, n)
			continue
		}
		if i <= len(o.AgentCPUs) {
			n.CPUs = o.AgentCPUs[i-1]
		}
		for _, c := range [][]string{
			{"netns", "add", n.NS},
			{"-n", n.NS, "link", "set", "lo", "up"},
			// One queue each way: AF_XDP binds a queue.
			{"-n", sw, "link", "add", v, "numtxqueues", "1", "numrxqueues", "1", "type", "veth", "peer", "name", "eth0",
				"numtxqueues", "1", "numrxqueues", "1", "netns", n.NS},
			{"-n", sw, "link", "set", v, "master", "br0"},
			{"-n", sw, "link", "set", v, "up"},
			{"-n", n.NS, "addr", "add", n.Addr + "/24", "dev", "eth0"},
			{"-n", n.NS, "link", "set", "eth0", "up"},
		} {
			if err := run(o.Log, "ip", c...); err != nil {
				return nil, err
			}
		}
		if o.XDP != "" {
			// A veth hands XDP_TX frames from the node's end to this end
			// only while this end runs an XDP program: hecd attaches one
			// that passes everything.
			if err := run(o.Log, "ip", "netns", "exec", sw, hecd, "--xdp-pass", v); err != nil {
				return nil, fmt.Errorf("xdp on the switch side of node %d: %w", i, err)
			}
		}
		if n.Rate, err = limit(o.Log, o.Rates, i, [2]string{n.NS, "eth0"}, [2]string{sw, v}); err != nil {
			return nil, err
		}
		if o.HostRail {
			h := "h" + strconv.Itoa(i)
			n.HostAddr = hostPrefix + strconv.Itoa(i)
			for _, c := range [][]string{
				{"-n", sw, "link", "add", h, "type", "veth", "peer", "name", "eth1", "netns", n.NS},
				{"-n", sw, "link", "set", h, "master", "br1"},
				{"-n", sw, "link", "set", h, "up"},
				{"-n", n.NS, "addr", "add", n.HostAddr + "/24", "dev", "eth1"},
				{"-n", n.NS, "link", "set", "eth1", "up"},
			} {
				if err := run(o.Log, "ip", c...); err != nil {
					return nil, err
				}
			}
			if n.HostRate, err = limit(o.Log, o.HostRates, i, [2]string{n.NS, "eth1"}, [2]string{sw, h}); err != nil {
				return nil, err
			}
		}
		st.Nodes = append(st.Nodes, n)
	}
	if o.Membership == "etcd" {
		if err := startEtcd(st, o.Log); err != nil {
			return nil, err
		}
	}
	st.Hecd = hecd
	for i := range st.Nodes {
		if st.Nodes[i].VM {
			continue
		}
		if err := startAgent(st, &st.Nodes[i], hecd, st.members()); err != nil {
			return nil, err
		}
	}
	// VMs last, one at a time: each boots on the machine's cores.
	for i := range st.Nodes {
		if st.Nodes[i].VM {
			if err := startVM(ctx, st, &st.Nodes[i], o.Bundle, st.members(), o.Log); err != nil {
				return nil, err
			}
			if err := st.save(); err != nil {
				return nil, err
			}
		}
	}
	if err := st.save(); err != nil {
		return nil, err
	}
	for _, n := range st.Nodes {
		if n.VM {
			continue // Up waited
		}
		if err := st.waitReady(ctx, n); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(o.Log, "cluster %s: %d agents up (%s membership), state in %s\n", o.Name, len(st.Nodes), o.Membership, st.Dir)
	return st, nil
}

// limit puts node i's rate from rates (its own, else index 0's) on both
// ends of its link, {namespace, device} each: out of the node, and out of
// the switch towards it. It returns the rate, "" for none.
func limit(log io.Writer, rates map[int]string, i int, ends ...[2]string) (string, error) {
	rate := rates[i]
	if rate == "" {
		rate = rates[0]
	}
	if rate == "" {
		return "", nil
	}
	for _, at := range ends {
		if err := run(log, "ip", "netns", "exec", at[0], "tc", "qdisc", "add", "dev", at[1], "root", "tbf",
			"rate", rate, "burst", "256kb", "latency", "50ms"); err != nil {
			return "", fmt.Errorf("rate %s on node %d's %s: %w", rate, i, at[1], err)
		}
	}
	return rate, nil
}

// FindHecd returns path, or else the hecd beside this program, on PATH
// or in bin/.
func FindHecd(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "hecd"); fileExists(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("hecd"); err == nil {
		return p, nil
	}
	if fileExists("bin/hecd") {
		return filepath.Abs("bin/hecd")
	}
	return "", errors.New("cluster: no hecd beside this program, on PATH or in bin/ (make build)")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// spawn starts argv inside namespace ns, in a session of its own (it
// outlives the tool), output to logPath, with env added to this process's
// environment, on cpus (none: anywhere).
func spawn(ns, logPath string, env []string, cpus []int, argv ...string) (int, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644) // a restarted agent logs after the last
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := affinity.Start(cmd, cpus); err != nil {
		return 0, fmt.Errorf("start %s in %s: %w", argv[0], ns, err)
	}
	// ip execs the program: this pid is the agent. Reap it should it end
	// while this process lives; after that, init does.
	go cmd.Wait()
	return cmd.Process.Pid, nil
}

// agentRegion is the size of a node agent's region: its sixteen queue
// pairs get 4 MiB windows, room for an object's stripes to go through in
// a few ops.
const agentRegion = 64 << 20

// members is the static member list every agent gets.
func (st *State) members() string {
	var members []string
	for _, n := range st.Nodes {
		members = append(members, fmt.Sprintf("%d@%s", n.Index, n.Peer()))
	}
	return strings.Join(members, ",")
}

// node returns node i's entry.
func (st *State) node(i int) (*Node, error) {
	for j := range st.Nodes {
		if st.Nodes[j].Index == i {
			if st.Nodes[j].VM {
				return nil, fmt.Errorf("node %d is an arm64 VM: stop and start it with hecctl qemu", i)
			}
			return &st.Nodes[j], nil
		}
	}
	return nil, fmt.Errorf("cluster %s has no node %d (1..%d)", st.Name, i, len(st.Nodes))
}

// Stop kills node i's agent (SIGKILL: as a crash, nothing flushed) and
// returns once it is gone.
func (st *State) Stop(i int) error {
	n, err := st.node(i)
	if err != nil {
		return err
	}
	// Under a loader the agent is the loader's child, in a process group
	// of its own: the loader goes first (it would start another), then
	// what it started.
	pids := descendants(n.PID)
	for _, pid := range pids {
		unix.Kill(pid, unix.SIGKILL)
	}
	for _, pid := range pids {
		for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster: node %d's agent (pid %d) still runs 5 s after SIGKILL", i, pid)
			}
		}
	}
	return nil
}

// descendants lists pid and every live process below it, parents first
// (none when pid is gone).
func descendants(pid int) []int {
	if !alive(pid) {
		return nil
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil && alive(c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// Start starts node i's agent again, stopping it first if it runs; wipe
// empties its state directory first (a node back with a new disk). It
// returns once the agent is ready.
func (st *State) Start(ctx context.Context, i int, wipe bool) error {
	if err := st.Stop(i); err != nil {
		return err
	}
	n, _ := st.node(i)
	dir := filepath.Join(st.Dir, fmt.Sprintf("node%d", n.Index))
	if wipe {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() != "hecd.log" {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
	}
	hecd := st.Hecd
	if hecd == "" {
		var err error
		if hecd, err = FindHecd(""); err != nil {
			return err
		}
	}
	if err := startAgent(st, n, hecd, st.members()); err != nil {
		return err
	}
	if err := st.save(); err != nil {
		return err
	}
	return st.waitReady(ctx, *n)
}

func startAgent(st *State, n *Node, hecd, members string) error {
	dir := filepath.Join(st.Dir, fmt.Sprintf("node%d", n.Index))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	n.TokenFile = st.Token
	args := []string{"--token-file", st.Token,
		"--shm", fmt.Sprintf("/dev/shm/hec-%s-%d", st.Name, n.Index), "--region-size", strconv.Itoa(agentRegion),
		"--tcp", net.JoinHostPort(n.Addr, strconv.Itoa(api.PortTCP)), "--mgmt", n.Mgmt(),
		"--resp", net.JoinHostPort(n.Addr, strconv.Itoa(api.PortRESP)), "--udp", net.JoinHostPort(n.Addr, strconv.Itoa(api.PortUDP)),
		"--state-dir", dir,
		"--node-id", strconv.Itoa(n.Index), "--peer", n.Peer(), "--cluster-key-file", st.Key, "--cluster", st.Name}
	if st.Membership == "etcd" {
		args = append(args, "--membership", "etcd://"+st.Etcd)
	} else {
		args = append(args, "--peers", members)
	}
	if st.XDP != "" {
		args = append(args, "--xdp", "eth0", "--xdp-mode", st.XDP)
	}
	args = append(args, st.AgentArgs...)
	if st.TrustedKey != "" {
		loader := append([]string{"supervise", "--trusted-key", st.TrustedKey}, st.LoaderArgs...)
		args = append(append(loader, "--"), args...)
	}
	pid, err := spawn(n.NS, filepath.Join(dir, "hecd.log"), st.AgentEnv, n.CPUs, append([]string{hecd}, args...)...)
	n.PID = pid
	return err
}

func startVM(ctx context.Context, st *State, n *Node, bundle, members string, log io.Writer) error {
	key, err := os.ReadFile(st.Key)
	if err != nil {
		return err
	}
	args := fmt.Sprintf("hec.node_id=%d hec.peer=%s hec.cluster_key=%s hec.cluster=%s", n.Index, n.Peer(), key, st.Name)
	if st.Transport == "rdma" {
		// Soft-RoCE on its NIC, the peer links over it, and the
		// handoff too: a host on the bridge with RDMA reaches the
		// agent as a host reaches its DPU.
		n.RDMA = net.JoinHostPort(n.Addr, strconv.Itoa(api.PortRDMA))
		args += " hec.rdma_rxe=eth0 hec.peer_transport=rdma hec.rdma_listen=" + n.RDMA
		// Soft-RoCE in emulated VMs sets connections up slowly: a
		// loaded machine's first dial took past the 2 s default.
		args += " hec.peer_deadline=10s"
	}
	if st.Membership == "etcd" {
		args += " hec.membership=etcd://" + st.Etcd
	} else {
		args += " hec.peers=" + members
	}
	n.TokenFile = st.Token
	token, err := os.ReadFile(st.Token)
	if err != nil {
		return err
	}
	vm, err := qemu.Up(ctx, qemu.Options{Name: fmt.Sprintf("hec-%s-%d", st.Name, n.Index), Bundle: bundle, Token: strings.TrimSpace(string(token)),
		StateDir: filepath.Join(st.Dir, fmt.Sprintf("node%d", n.Index)), Shm: fmt.Sprintf("/dev/shm/hec-%s-%d", st.Name, n.Index),
		ShmSize: 16 << 20, MemoryMB: 512, CPUs: 1, NetNS: st.Switch, Tap: "v" + strconv.Itoa(n.Index), GuestIP: n.Addr + "/24",
		KernelArgs: args, HTTP: clientTimeout(st.Switch, time.Second), ReadyTimeout: 90 * time.Second})
	if err != nil {
		return fmt.Errorf("node %d (arm64 VM): %w", n.Index, err)
	}
	n.PID = vm.PID
	fmt.Fprintf(log, "node %d: arm64 VM up in %v (QEMU pid %d)\n", n.Index, vm.BootTime.Round(10*time.Millisecond), vm.PID)
	return nil
}

func startEtcd(st *State, log io.Writer) error {
	if _, err := exec.LookPath("etcd"); err != nil {
		return errors.New("cluster: etcd not found (apt-get install etcd-server)")
	}
	client, peerURL := "http://"+switchAddr+":2379", "http://127.0.0.1:2380"
	pid, err := spawn(st.Switch, filepath.Join(st.Dir, "etcd.log"), nil, nil, "etcd", "--data-dir", filepath.Join(st.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL)
	if err != nil {
		return err
	}
	st.Etcd, st.EtcdPID = switchAddr+":2379", pid
	hc := Client(st.Switch)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := hc.Get(client + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				fmt.Fprintf(log, "etcd ready on %s (in %s)\n", st.Etcd, st.Switch)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: etcd not healthy within 20 s (log: %s)", filepath.Join(st.Dir, "etcd.log"))
		}
	}
}

// waitReady waits until node n's agent is ready and has calibrated its
// rail (it does so in the background just after; measuring the cluster
// meanwhile would measure the calibration too).
func (st *State) waitReady(ctx context.Context, n Node) error {
	m := n.Client()
	m.HTTP = clientTimeout(n.NS, 2*time.Second)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if status, err := m.Status(ctx); err == nil && len(status.Rails) > 0 {
			return nil
		}
		if !alive(n.PID) {
			// Its log's last line says why.
			log := filepath.Join(st.Dir, fmt.Sprintf("node%d", n.Index), "hecd.log")
			b, _ := os.ReadFile(log)
			b = bytes.TrimSpace(b)
			return fmt.Errorf("cluster: node %d's agent exited: %q (log: %s)", n.Index, b[bytes.LastIndexByte(b, '\n')+1:], log)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster: node %d's agent not ready within 20 s", n.Index)
		}
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool { return !sysinfo.Ended(pid) }

func (st *State) save() error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(st.Dir, "state.json"), b, 0o644)
}

// Load reads a cluster's state.
func Load(name, stateDir string) (*State, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir(name)
	}
	b, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("cluster %q is not up (%w)", name, err)
	}
	var st State
	return &st, json.Unmarshal(b, &st)
}

// List returns the clusters that are up with their state in the default
// place.
func List() []*State {
	dirs, _ := filepath.Glob(DefaultStateDir("*"))
	var out []*State
	for _, d := range dirs {
		if st, err := Load(strings.TrimPrefix(filepath.Base(d), "cluster-"), d); err == nil {
			out = append(out, st)
		}
	}
	return out
}

// namespaces lists the network namespaces named after cluster name.
func namespaces(name string) []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var ns []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], "hec-"+name+"-") {
			ns = append(ns, f[0])
		}
	}
	return ns
}

// Down removes cluster name: its processes (those recorded, and any other
// still inside its namespaces), its namespaces with their links, its
// shared-memory files and its state. It works from the names alone when the
// state is gone, and does nothing, successfully, for a cluster that is not
// there.
func Down(name, stateDir string, log io.Writer) error {
	if log == nil {
		log = io.Discard
	}
	if stateDir == "" {
		stateDir = DefaultStateDir(name)
	}
	var pids []int
	if st, err := Load(name, stateDir); err == nil {
		for _, n := range st.Nodes {
			pids = append(pids, n.PID)
		}
		if st.EtcdPID > 0 {
			pids = append(pids, st.EtcdPID)
		}
	}
	nss := namespaces(name)
	for _, ns := range nss {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	started := map[int]uint64{} // each process's start: a pid taken again is another
	for _, pid := range pids {
		if t, err := (sysinfo.FS{}).StartTime(pid); err == nil {
			started[pid] = t
		}
	}
	// Stop politely, then for good.
	for _, pid := range pids {
		unix.Kill(pid, unix.SIGTERM)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		left := false
		for _, pid := range pids {
			left = left || alive(pid)
		}
		if !left {
			break
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	// Return only once everything started is gone.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		left := false
		for _, pid := range pids {
			left = left || alive(pid)
		}
		if !left {
			break
		}
	}
	// And reaped: an ended process stays in the process table (ps and
	// pgrep list it) until its parent — PID 1 once hecctl cluster up has
	// returned, which reaps when it will — collects it.
	unreaped := func() (left []int) {
		for _, pid := range pids {
			if t, err := (sysinfo.FS{}).StartTime(pid); err == nil && t == started[pid] {
				left = append(left, pid)
			}
		}
		return left
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(unreaped()) > 0; {
		time.Sleep(10 * time.Millisecond)
	}
	if left := unreaped(); len(left) > 0 {
		fmt.Fprintf(log, "cluster %s: processes %v ended but their parent has not reaped them\n", name, left)
	}
	var errs []error
	for _, ns := range nss {
		if err := run(log, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	shm, _ := filepath.Glob(fmt.Sprintf("/dev/shm/hec-%s-*", name))
	for _, f := range shm {
		os.Remove(f)
	}
	if err := os.RemoveAll(stateDir); err != nil {
		errs = append(errs, err)
	}
	if len(nss) > 0 || len(pids) > 0 {
		fmt.Fprintf(log, "cluster %s: stopped %d processes, removed %d namespaces\n", name, len(pids), len(nss))
	}
	return errors.Join(errs...)
}

// Client is an HTTP client whose connections are made inside network
// namespace ns: the way in to a cluster's agents from outside.
func Client(ns string) *http.Client { return clientTimeout(ns, 120*time.Second) }

func clientTimeout(ns string, d time.Duration) *http.Client {
	return &http.Client{Timeout: d, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return DialIn(ctx, ns, network, addr)
		}}}
}

// DialIn connects to addr from inside network namespace ns: the socket is
// made there (on a thread switched into ns and back), then used from here.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := InNS(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// ListenPacketIn opens a packet socket on addr inside network namespace
// ns (as DialIn).
func ListenPacketIn(ns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := InNS(ns, func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// InNS runs f on an OS thread switched into network namespace ns, then
// switches the thread back. Sockets f makes stay in ns.
func InNS(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("namespace %s: %w", ns, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("enter %s: %w", ns, err)
			return
		}
		err = f()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // back home: the thread may be reused
		} // else the thread stays locked and ends with this goroutine
		ch <- err
	}()
	return <-ch
}

// Remains lists what cluster name left behind: namespaces, the processes
// among pids still running, shared-memory files and the state directory.
// Empty after a clean Down.
func Remains(name, stateDir string, pids []int) []string {
	var left []string
	for _, ns := range namespaces(name) {
		left = append(left, "namespace "+ns)
	}
	for _, pid := range pids {
		if alive(pid) {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	shm, _ := filepath.Glob(fmt.Sprintf("/dev/shm/hec-%s-*", name))
	for _, f := range shm {
		left = append(left, "file "+f)
	}
	if stateDir == "" {
		stateDir = DefaultStateDir(name)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		left = append(left, "state "+stateDir)
	}
	return left
}

// Exec returns a command that runs argv inside node's namespace.
func (st *State) Exec(node int, argv ...string) (*exec.Cmd, error) {
	for _, n := range st.Nodes {
		if n.Index == node && n.VM {
			return nil, fmt.Errorf("node %d is an arm64 VM: no shell in it (its agent answers on %s)", node, n.Mgmt())
		}
		if n.Index == node {
			cmd := exec.Command("ip", append([]string{"netns", "exec", n.NS}, argv...)...)
			cmd.Env = append(os.Environ(), n.Env()...) // hecctl there finds the node's agent by itself
			return cmd, nil
		}
	}
	return nil, fmt.Errorf("cluster %s has no node %d (1..%d)", st.Name, node, len(st.Nodes))
}
