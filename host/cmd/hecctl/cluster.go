package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hecsys/hec/test/cluster"
)

const clusterUsage = `usage: hecctl cluster up|down|status|ping|exec [flags]

  up --agents N [--vm K] [--membership static|etcd] [--rate LINK=RATE ...] [--xdp MODE] [--name C]
        one network namespace per node (10.77.0.N, a private range seen only
        inside them), a veth from each to a bridge, a hecd per node; the
        last K agents are arm64 VMs (make image) on taps on the bridge; LINK
        is a node number or "all", RATE a tc rate (1gbit, 500mbit)
  down [--name C]        remove everything of the cluster, also after a crash
  status [--name C]      nodes, their agents and peers
  ping [--name C] [--bytes B] [--pings N]
        round trips and bandwidth between every pair of agents (the matrix);
        calibrates the network rails (rails.json in the cluster's state)
  exec [--name C] NODE -- CMD...   run CMD inside node NODE's namespace
`

type rateFlags map[int]string

func (r rateFlags) String() string { return fmt.Sprint(map[int]string(r)) }
func (r rateFlags) Set(s string) error {
	link, rate, ok := strings.Cut(s, "=")
	if !ok || rate == "" {
		return fmt.Errorf("want LINK=RATE, such as 2=1gbit or all=500mbit")
	}
	if link == "all" {
		r[0] = rate
		return nil
	}
	n, err := strconv.Atoi(link)
	if err != nil || n < 1 {
		return fmt.Errorf("link %q: a node number (1..) or all", link)
	}
	r[n] = rate
	return nil
}

func clusterCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, clusterUsage)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("hecctl cluster "+args[0], flag.ContinueOnError)
	name := fs.String("name", "hec", "cluster name")
	state := fs.String("state", "", "state directory (default /run/hec/cluster-NAME)")
	switch sub, rest := args[0], args[1:]; sub {
	case "up":
		agents := fs.Int("agents", 3, "nodes, each with an agent")
		membership := fs.String("membership", "static", "static or etcd")
		vms := fs.Int("vm", 0, "arm64 VMs among the agents")
		rates := rateFlags{}
		fs.Var(rates, "rate", "LINK=RATE: a tc rate limit on a node's link (repeatable)")
		hecd := fs.String("hecd", "", "agent binary (default: hecd beside hecctl)")
		bundle := fs.String("bundle", "", "the arm64 image for --vm (default .cache/images/qemu: make image)")
		xdpMode := fs.String("xdp", "", "attach each agent's XDP fast path to its veth: auto, native or generic (default off)")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		st, err := cluster.Up(ctx, cluster.Options{Name: *name, Agents: *agents, VMs: *vms, Bundle: *bundle, Rates: rates,
			Membership: *membership, Hecd: *hecd, StateDir: *state, XDP: *xdpMode, Log: out})
		if err != nil {
			return err
		}
		return printCluster(st, out)
	case "down":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		return cluster.Down(*name, *state, out)
	case "status":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		st, err := cluster.Load(*name, *state)
		if err != nil {
			return err
		}
		return printCluster(st, out)
	case "ping":
		bytes := fs.Int64("bytes", 256<<20, "bytes each agent sends each other one")
		pings := fs.Int("pings", 200, "round trips each agent makes to each other one")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		st, err := cluster.Load(*name, *state)
		if err != nil {
			return err
		}
		res, err := st.Ping(ctx, *pings, *bytes)
		if err != nil {
			return err
		}
		return printMatrix(st, res, out)
	case "exec":
		if err := fs.Parse(rest); err != nil {
			return err
		}
		argv := fs.Args()
		if len(argv) < 2 {
			return errors.New("cluster exec: want NODE -- CMD [ARGS]")
		}
		node, err := strconv.Atoi(argv[0])
		if err != nil {
			return fmt.Errorf("cluster exec: node %q: a number", argv[0])
		}
		argv = argv[1:]
		if argv[0] == "--" {
			argv = argv[1:]
		}
		st, err := cluster.Load(*name, *state)
		if err != nil {
			return err
		}
		cmd, err := st.Exec(node, argv...)
		if err != nil {
			return err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, os.Stderr
		return cmd.Run()
	}
	fmt.Fprint(os.Stderr, clusterUsage)
	return fmt.Errorf("cluster: unknown command %q", args[0])
}

func printCluster(st *cluster.State, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster %s: %s on bridge br0 in netns %s, %s membership", st.Name, st.Subnet, st.Switch, st.Membership)
	if st.Etcd != "" {
		fmt.Fprintf(tw, " (etcd %s)", st.Etcd)
	}
	fmt.Fprintf(tw, "\nNODE\tKIND\tNETNS\tADDRESS\tPID\tRATE\n")
	for _, n := range st.Nodes {
		rate := n.Rate
		if rate == "" {
			rate = "-"
		}
		kind := "hecd"
		if n.VM {
			kind = "arm64 VM (QEMU)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", n.Index, kind, n.NS, n.Addr, n.PID, rate)
	}
	return tw.Flush()
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
