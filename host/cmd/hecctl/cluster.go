package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/shared/api"
)

func clusterCmd(a *app) *cobra.Command {
	cl := groupCmd("cluster", "test clusters of network namespaces, an agent in each: up, down, status, ping, exec")
	cl.Long = `A test cluster is one network namespace per node (10.77.0.N, a private
range seen only inside them), a veth from each to a bridge in a switch
namespace, and a hecd per node (root only). The last --vm agents are
arm64 VMs (make image) on taps on the bridge.`
	var name, state string
	cl.PersistentFlags().StringVar(&name, "name", "hec", "cluster name")
	cl.PersistentFlags().StringVar(&state, "state", "", "state directory (default /run/hec/cluster-NAME)")

	var o cluster.Options
	rates := rateFlags{}
	up := &cobra.Command{Use: "up", Short: "make a cluster and start its agents", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Name, o.StateDir, o.Rates, o.Log = name, state, rates, a.out
			if len(o.LoaderArgs) > 0 && o.TrustedKey == "" {
				return usageError{fmt.Errorf("--loader-arg: the agents run under a loader only with --trusted-key")}
			}
			st, err := cluster.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			return a.printCluster(cmd.Context(), st)
		}}
	f := up.Flags()
	f.IntVar(&o.Agents, "agents", 3, "nodes, each with an agent")
	f.StringVar(&o.Membership, "membership", "static", "static or etcd")
	f.IntVar(&o.VMs, "vm", 0, "arm64 VMs among the agents (the last ones)")
	f.Var(rates, "rate", "LINK=RATE: a tc rate limit on a node's link (LINK a node number or all; repeatable)")
	f.StringVar(&o.Hecd, "hecd", "", "agent binary (default: hecd beside hecctl)")
	f.StringVar(&o.Bundle, "bundle", "", "the arm64 image for --vm (default .cache/images/qemu: make image)")
	f.StringVar(&o.XDP, "xdp", "", "attach each agent's XDP fast path to its veth: auto, native or generic (default off)")
	f.StringVar(&o.Transport, "transport", "tcp", "carry the agents' peer links over tcp, or rdma (soft-RoCE on each agent's NIC: every agent a VM, --vm N = --agents N)")
	f.StringArrayVar(&o.AgentArgs, "agent-arg", nil, "a hecd flag for every agent, as --agent-arg=--ec-scrub=1m (repeatable)")
	f.StringVar(&o.TrustedKey, "trusted-key", "", "run the agents under their loader (hecd supervise) trusting this public key, so hecctl flash --cluster can update them")
	f.StringArrayVar(&o.LoaderArgs, "loader-arg", nil, "a hecd supervise flag for every agent, as --loader-arg=--gate=20s (repeatable; with --trusted-key)")

	down := &cobra.Command{Use: "down", Short: "remove everything of the cluster, also after a crash of hecctl; returns once all its processes are gone",
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cluster.Down(name, state, a.out) }}
	status := &cobra.Command{Use: "status", Short: "the nodes: how to reach each agent, and its peers", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := cluster.Load(name, state)
			if err != nil {
				return err
			}
			return a.printCluster(cmd.Context(), st)
		}}
	var bytes int64
	var pings int
	ping := &cobra.Command{Use: "ping", Short: "round trips and bandwidth between every pair of agents; calibrates the network rails",
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := cluster.Load(name, state)
			if err != nil {
				return err
			}
			res, err := st.Ping(cmd.Context(), pings, bytes)
			if err != nil {
				return err
			}
			return printMatrix(st, res, a.out)
		}}
	ping.Flags().Int64Var(&bytes, "bytes", 256<<20, "bytes each agent sends each other one")
	ping.Flags().IntVar(&pings, "pings", 200, "round trips each agent makes to each other one")
	exec := &cobra.Command{Use: "exec NODE -- CMD [ARGS]",
		Short: "run CMD inside node NODE's namespace, with HEC_AGENT and HEC_MGMT naming its agent",
		Args:  wantArgs(2, -1, "NODE -- CMD [ARGS]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			node, err := strconv.Atoi(args[0])
			if err != nil {
				return usageError{fmt.Errorf("cluster exec: node %q: a number", args[0])}
			}
			st, err := cluster.Load(name, state)
			if err != nil {
				return err
			}
			argv := args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usageError{fmt.Errorf("cluster exec: want NODE -- CMD [ARGS]")}
			}
			c, err := st.Exec(node, argv...)
			if err != nil {
				return err
			}
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, a.out, os.Stderr
			return c.Run()
		}}
	exec.Flags().SetInterspersed(false) // what follows NODE is the command's
	nodeArg := func(args []string) (int, *cluster.State, error) {
		node, err := strconv.Atoi(args[0])
		if err != nil {
			return 0, nil, usageError{fmt.Errorf("node %q: a number", args[0])}
		}
		st, err := cluster.Load(name, state)
		return node, st, err
	}
	stop := &cobra.Command{Use: "stop NODE", Short: "kill node NODE's agent (SIGKILL, as a crash); start brings it back",
		Args: wantArgs(1, 1, "NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			node, st, err := nodeArg(args)
			if err != nil {
				return err
			}
			if err := st.Stop(node); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "node %d: agent stopped\n", node)
			return nil
		}}
	var wipe bool
	start := &cobra.Command{Use: "start NODE", Short: "start node NODE's agent again (stopping it first if it runs); --wipe empties its state first, as a node back with a new disk",
		Args: wantArgs(1, 1, "NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			node, st, err := nodeArg(args)
			if err != nil {
				return err
			}
			if err := st.Start(cmd.Context(), node, wipe); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "node %d: agent ready%s\n", node, map[bool]string{true: " (state wiped)"}[wipe])
			return nil
		}}
	start.Flags().BoolVar(&wipe, "wipe", false, "empty the node's state directory first (its kv store and shards)")
	cl.AddCommand(up, down, uses(status, useOutput), ping, exec, stop, start)
	return cl
}

// clusterNode is a node as cluster status -o json shows it.
type clusterNode struct {
	cluster.Node
	Agent   string           `json:"agent"`
	Mgmt    string           `json:"mgmt"`
	Version string           `json:"version,omitempty"`
	Peers   []api.PeerStatus `json:"peers"`
	Error   string           `json:"error,omitempty"`
}

func (a *app) printCluster(ctx context.Context, st *cluster.State) error {
	var nodes []clusterNode
	for _, n := range st.Nodes {
		cn := clusterNode{Node: n, Agent: n.Agent(), Mgmt: n.Mgmt()}
		m := &host.Mgmt{Addr: n.Mgmt(), HTTP: cluster.Client(st.Switch), Token: n.Token()}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if s, err := m.Status(sctx); err == nil {
			cn.Peers, cn.Version = s.Peers, s.Version
		} else {
			cn.Error = err.Error()
		}
		cancel()
		nodes = append(nodes, cn)
	}
	if a.jsonOut() {
		return a.printJSON(map[string]any{"cluster": st, "nodes": nodes})
	}
	out := a.out
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster %s: %s on bridge br0 in netns %s, %s membership", st.Name, st.Subnet, st.Switch, st.Membership)
	if st.Etcd != "" {
		fmt.Fprintf(tw, " (etcd %s)", st.Etcd)
	}
	fmt.Fprintf(tw, "\nNODE\tKIND\tVERSION\tNETNS\tADDRESS\tPID\tRATE\tREACH IT WITH\tPEERS ALIVE\n")
	for i, n := range st.Nodes {
		rate := n.Rate
		if rate == "" {
			rate = "-"
		}
		kind := "hecd"
		if st.TrustedKey != "" {
			kind = "hecd supervise"
		}
		if n.VM {
			kind = "arm64 VM (QEMU)"
		}
		peers := nodes[i].Error
		if peers == "" {
			alive := 0
			for _, p := range nodes[i].Peers {
				if p.Alive {
					alive++
				}
			}
			peers = fmt.Sprintf("%d of %d", alive, len(nodes[i].Peers))
		}
		reach := "--agent " + n.Agent()
		if n.RDMA != "" {
			reach += " (or rdma://" + n.RDMA + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s --mgmt %s\t%s\n", n.Index, kind, dash(nodes[i].Version), n.NS, n.Addr, n.PID, rate,
			reach, n.Mgmt(), peers)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "(the management addresses are inside the cluster: hecctl cluster exec N -- hecctl status reaches node N's agent)\n")
	return nil
}

func printMatrix(st *cluster.State, res []cluster.PairResult, out io.Writer) error {
	at := map[[2]int]cluster.PairResult{}
	var failed []string
	for _, r := range res {
		at[[2]int{r.From, r.To}] = r
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("%d → %d: %s", r.From, r.To, r.Error))
		}
	}
	for _, m := range []struct {
		title string
		cell  func(cluster.PairResult) string
	}{
		{"round trip p50 (µs), agent to agent", func(r cluster.PairResult) string { return fmt.Sprintf("%.0f", r.RTTP50Us) }},
		{"bandwidth (GB/s), agent to agent", func(r cluster.PairResult) string { return fmt.Sprintf("%.2f", r.GBPerSec) }},
	} {
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(out, "%s (row: from, column: to)\n", m.title)
		fmt.Fprint(tw, "\t")
		for _, b := range st.Nodes {
			fmt.Fprintf(tw, "%d\t", b.Index)
		}
		fmt.Fprintln(tw)
		for _, a := range st.Nodes {
			fmt.Fprintf(tw, "%d\t", a.Index)
			for _, b := range st.Nodes {
				r, ok := at[[2]int{a.Index, b.Index}]
				switch {
				case a.Index == b.Index:
					fmt.Fprint(tw, "-\t")
				case !ok || r.Error != "":
					fmt.Fprint(tw, "FAIL\t")
				default:
					fmt.Fprintf(tw, "%s\t", m.cell(r))
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "network rails calibrated: %s/rails.json\n", st.Dir)
	if len(failed) > 0 {
		return fmt.Errorf("%d pairs failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}
