package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/test/cluster"
)

func collCmd(a *app) *cobra.Command {
	c := groupCmd("coll", "collectives on the host rail, the DPU rail or both: bench, status")
	c.AddCommand(collBenchCmd(a), collRankCmd(), collStatusCmd(a))
	return c
}

// benchOptions are coll bench's flags.
type benchOptions struct {
	world              int
	rails              []string
	objective          string
	explain            bool
	kind, dtype, redop string
	sizes              []string
	iters, warmup      int
	plot, hecd         string
	deadline           time.Duration
	// Where the ranks run: netns, loopback or auto (netns when root);
	// in namespaces, the links' rates and the arm64 VMs among the agents.
	net               string
	hostRate, dpuRate string
	vms               int
	bundle            string
	bind              bool // each rank on its share of the cores
}

func collBenchCmd(a *app) *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{Use: "bench", Short: "start N ranks (a host process and an agent each) and print nccl-tests' table for each rail",
		Long: `bench starts --world ranks on this machine: each a host process and, for
the dpu and auto rails, an agent (hecd) of its own. Rail host: the host
processes run the collective among themselves. Rail dpu: each hands its
buffer to its agent and the agents run it over the peer layer. Rail auto:
the buffer is split between the two by the planner, from a calibration of
each, and both run at once.

As root (--net netns, the default then) each rank is a network namespace
of a cluster made for the run (hecctl cluster): its agent on the agents'
bridge (eth0), its host process also on a second bridge (eth1) for the
host rail, so --dpu-rate and --host-rate can limit the two rails apart
(tc rates: 200mbit, 1gbit), and --vm N makes the last N agents arm64 VMs
(make image first). Otherwise (--net loopback) everything runs on
loopback. Each host process and each agent gets a core's share of the
machine (GOMAXPROCS = cores / N, at least 1; an explicit GOMAXPROCS
holds), as MPI binds a rank to a core and a DPU's agent has its own.
With --bind (the default) rank i's host process and agent run on the
i-th N-th of the cores where the ranks fit them, else on core i mod
cores, as mpirun binds ranks to cores (--bind-to core:overload-allowed,
which the bench gives Open MPI too); VMs are not bound.

Columns as nccl-tests prints them: size (bytes), count (elements), type,
redop, time (µs, the slowest rank's mean), algbw and busbw (GB/s), and
wrong (elements that differ from the expected result, over every rank and
iteration), plus host-cpu: the host process's CPU per collective (ms, mean
over the ranks) — what offloading to the DPU frees.

A rank or agent that dies makes every other rank fail within --deadline
with an error naming it: the command then stops them all and says so.`,
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.collBench(cmd.Context(), o) }}
	collBenchFlags(cmd, &o)
	return uses(cmd, useOutput)
}

// collBenchFlags defines coll bench's flags on cmd (rails plan's too).
func collBenchFlags(cmd *cobra.Command, o *benchOptions) {
	f := cmd.Flags()
	f.IntVar(&o.world, "world", 4, "ranks (1 to 64)")
	railsFlag(f, &o.rails, rail.Choices, rail.Choices, "rails to run, in order: host, dpu, auto (comma-separated)")
	f.Var(f.Lookup("rails").Value, "rail", "")
	f.MarkDeprecated("rail", "use --rails")
	f.StringVar(&o.kind, "op", "allreduce", "collective: allreduce, reducescatter, allgather, broadcast, reduce, alltoall")
	f.StringVar(&o.objective, "objective", "time", "what auto chooses for: time, or host-cpu (the least host CPU within 1.1× of the fastest)")
	f.BoolVar(&o.explain, "explain", false, "after the rows, print auto's plan for every size band and why (each candidate's predicted and measured time)")
	f.StringVar(&o.dtype, "dtype", "float32", "float32, float64, float16, bfloat16, int32, int64, uint8")
	f.StringVar(&o.redop, "redop", "sum", "sum, prod, min, max, avg")
	f.StringSliceVar(&o.sizes, "sizes", []string{"8", "64K", "1M", "16M", "64M"}, "sizes in bytes (K, M, G: powers of 1024)")
	f.IntVar(&o.iters, "iters", 5, "timed iterations per size")
	f.IntVar(&o.warmup, "warmup", 1, "untimed iterations first")
	f.StringVar(&o.plot, "plot", "", "draw busbw against size for each rail into this PNG")
	f.StringVar(&o.hecd, "hecd", "", "agent binary (default: hecd beside hecctl)")
	f.DurationVar(&o.deadline, "deadline", 3*time.Second, "a rank or agent silent this long while others wait on it is declared dead")
	f.StringVar(&o.net, "net", "auto", "where the ranks run: netns (root only), loopback, or auto (netns when root)")
	f.StringVar(&o.hostRate, "host-rate", "", "limit each rank's host-rail link to this tc rate (netns only)")
	f.StringVar(&o.dpuRate, "dpu-rate", "", "limit each agent's link to this tc rate (netns only)")
	f.IntVar(&o.vms, "vm", 0, "the last N agents are arm64 VMs (netns only; make image first)")
	f.StringVar(&o.bundle, "bundle", "", "the VMs' image bundle (default .cache/images/qemu)")
	f.BoolVar(&o.bind, "bind", true, "run each rank's host process and agent on its share of the cores (core i mod cores where the ranks outnumber them)")
}

func (o *benchOptions) check() error {
	if o.world < 1 || o.world > 64 {
		return usageError{fmt.Errorf("--world %d: want 1 to 64", o.world)}
	}
	if _, err := rail.ParseObjective(o.objective); err != nil {
		return usageError{err}
	}
	k, err := coll.ParseKind(o.kind)
	if err != nil || k == coll.KindBarrier {
		return usageError{fmt.Errorf("--op %s: want allreduce, reducescatter, allgather, broadcast, reduce or alltoall", o.kind)}
	}
	if slices.Contains(o.rails, rail.Auto) && k != coll.KindAllReduce {
		return usageError{fmt.Errorf("--rails auto splits allreduce only")}
	}
	if _, err := coll.ParseDType(o.dtype); err != nil {
		return usageError{err}
	}
	if _, err := coll.ParseOp(o.redop); err != nil {
		return usageError{err}
	}
	if _, err := parseSizes(o.sizes); err != nil {
		return usageError{fmt.Errorf("--sizes: %w", err)}
	}
	if o.iters < 1 || o.warmup < 0 {
		return usageError{fmt.Errorf("--iters %d --warmup %d: want at least one timed iteration", o.iters, o.warmup)}
	}
	if o.deadline < 100*time.Millisecond {
		return usageError{fmt.Errorf("--deadline %v: want at least 100ms", o.deadline)}
	}
	if o.net == "auto" {
		o.net = "loopback"
		if os.Geteuid() == 0 {
			o.net = "netns"
		}
	}
	switch o.net {
	case "netns":
		if os.Geteuid() != 0 {
			return usageError{errors.New("--net netns: making network namespaces needs root (or --net loopback)")}
		}
	case "loopback":
		if o.hostRate != "" || o.dpuRate != "" || o.vms != 0 {
			return usageError{errors.New("--host-rate, --dpu-rate and --vm need --net netns (root)")}
		}
	default:
		return usageError{fmt.Errorf("--net %s: want netns, loopback or auto", o.net)}
	}
	if o.vms < 0 || o.vms > o.world {
		return usageError{fmt.Errorf("--vm %d: want 0 to --world (%d)", o.vms, o.world)}
	}
	return nil
}

// rankPlace is where a rank runs: its agent, its host-rail listener, and
// the command prefix that puts a process there.
type rankPlace struct {
	agent, tokenFile string
	listen           string
	prefix           []string
}

// rootPort is rank 0's rendezvous port inside a namespace of its own.
const rootPort = 7470

// benchCluster makes the cluster a netns bench runs in: a node per rank,
// agents sized for the bench's buffers, links limited as asked. It
// returns the cluster, each rank's place and rank 0's rendezvous address;
// env is added to every agent's environment (their core's share), and
// agent i runs on cores[i] where there is one.
func benchCluster(ctx context.Context, o benchOptions, dir string, region int, env []string, cores [][]int) (*cluster.State, []rankPlace, string, error) {
	name := fmt.Sprintf("cb%d", os.Getpid()%1_000_000)
	st, err := cluster.Up(ctx, cluster.Options{Name: name, Agents: o.world, VMs: o.vms, Bundle: o.bundle, Hecd: o.hecd,
		StateDir: filepath.Join(dir, "cluster"), Rates: map[int]string{0: o.dpuRate},
		HostRail: true, HostRates: map[int]string{0: o.hostRate},
		AgentArgs: []string{"--region-size", strconv.Itoa(region), "--queue-pairs", "2",
			"--peer-deadline", o.deadline.String(), "--log-level", "warn"},
		AgentEnv: env, AgentCPUs: cores})
	if err != nil {
		return nil, nil, "", fmt.Errorf("coll bench: %w", err)
	}
	places := make([]rankPlace, o.world)
	for i, n := range st.Nodes {
		places[i] = rankPlace{agent: n.Agent(), tokenFile: n.TokenFile, listen: net.JoinHostPort(n.HostAddr, "0"),
			prefix: []string{"ip", "netns", "exec", n.NS}}
	}
	return st, places, net.JoinHostPort(st.Nodes[0].HostAddr, strconv.Itoa(rootPort)), nil
}

// coreShare is the environment that gives each of world ranks, and each
// of their agents, a core's share of this machine, as MPI binds a rank to
// a core and as a DPU's agent has cores of its own: more threads than
// that only contend for the cores (with GOMAXPROCS 2, two agents and two
// ranks on two cores, a 1 MiB allreduce on the DPU rail took about a
// third longer than with 1). Nil when GOMAXPROCS is set: the user's
// choice holds.
func coreShare(world int) []string {
	if os.Getenv("GOMAXPROCS") != "" {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(max(1, runtime.NumCPU()/world))}
}

// freePorts returns n loopback ports free right now.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// benchProc is a process the bench started: a rank or an agent.
type benchProc struct {
	what   string // "rank 2", "the agent of rank 2"
	cmd    *exec.Cmd
	cpus   []int // where it runs (none: anywhere)
	stderr *tailBuffer
	done   chan struct{}
	err    error
}

func (a *app) collBench(ctx context.Context, o benchOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	sizes, _ := parseSizes(o.sizes)
	needAgents := slices.Contains(o.rails, rail.DPU) || slices.Contains(o.rails, rail.Auto)
	dir, err := os.MkdirTemp("", "hec-coll-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var procs []*benchProc
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			<-p.done
		}
	}()
	share := coreShare(o.world)
	var cores [][]int // rank i's share of the cores, when bound
	if o.bind {
		all, err := affinity.Allowed()
		if err != nil {
			return err
		}
		cores = affinity.Shares(all, o.world)
	}
	coresOf := func(rank int) []int {
		if cores == nil {
			return nil
		}
		return cores[rank]
	}
	// start makes a rank's or an agent's process, with its core's share,
	// on the cores given (none: anywhere).
	start := func(what string, cpus []int, argv []string) *benchProc {
		cmd := exec.Command(argv[0], argv[1:]...)
		if share != nil {
			cmd.Env = append(os.Environ(), share...)
		}
		p := &benchProc{what: what, cmd: cmd, cpus: cpus, stderr: &tailBuffer{}, done: make(chan struct{})}
		cmd.Stderr = p.stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return p
	}
	run := func(p *benchProc) error {
		if err := affinity.Start(p.cmd, p.cpus); err != nil {
			return fmt.Errorf("%s: %w", p.what, err)
		}
		procs = append(procs, p)
		go func() { p.err = p.cmd.Wait(); close(p.done) }()
		return nil
	}
	// Two queue pairs with windows that hold the largest size's send and
	// recv buffers, so they are handed over in place.
	region := max(64<<20, 2*(2*sizes[len(sizes)-1]+(16<<20)))
	places := make([]rankPlace, o.world)
	var root, where string
	if o.net == "netns" {
		st, p, r, err := benchCluster(ctx, o, dir, region, share, cores)
		if err != nil {
			return err
		}
		defer cluster.Down(st.Name, st.Dir, nil)
		places, root = p, r
		where = fmt.Sprintf("in network namespaces (cluster %s", st.Name)
		if o.dpuRate != "" || o.hostRate != "" {
			where += fmt.Sprintf("; links: agents %s, host rail %s", cmp.Or(o.dpuRate, "unlimited"), cmp.Or(o.hostRate, "unlimited"))
		}
		if o.vms > 0 {
			where += fmt.Sprintf("; %d arm64 VMs", o.vms)
		}
		where += ")"
	}
	shms := make([]string, o.world)
	if needAgents && o.net == "loopback" {
		hecd, err := cluster.FindHecd(o.hecd)
		if err != nil {
			return err
		}
		ports, err := freePorts(2 * o.world) // the agents' peer layer, then their management API
		if err != nil {
			return err
		}
		var peers, mgmts []string
		for i, p := range ports[:o.world] {
			peers = append(peers, fmt.Sprintf("%d@127.0.0.1:%d", i+1, p))
			mgmts = append(mgmts, fmt.Sprintf("127.0.0.1:%d", ports[o.world+i]))
		}
		for i := range o.world {
			shms[i] = fmt.Sprintf("/dev/shm/hec-coll-%d-%d", os.Getpid(), i)
			state := filepath.Join(dir, fmt.Sprintf("agent%d", i))
			argv := []string{hecd, "--shm", shms[i], "--region-size", strconv.Itoa(region), "--queue-pairs", "2",
				"--tcp", "off", "--mgmt", mgmts[i], "--resp", "off", "--udp", "off", "--state-dir", state,
				"--peer", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--peers", strings.Join(peers, ","),
				"--node-id", strconv.Itoa(i + 1), "--cluster-key-file", keyFile, "--peer-deadline", o.deadline.String(),
				"--log-level", "warn"}
			p := start(fmt.Sprintf("the agent of rank %d", i), coresOf(i), argv)
			if err := run(p); err != nil {
				return err
			}
			defer os.Remove(shms[i])
			places[i].agent = shms[i]
		}
		// Each agent sizes its region (formatting follows at once), then
		// calibrates its rail in the background, burning its cores for a
		// few hundred milliseconds: measured meanwhile, the first sizes
		// would measure the calibration too (a 4 KiB allreduce on the DPU
		// rail took 3.1 ms then, 0.47 ms after).
		sized := func(i int) bool { st, err := os.Stat(shms[i]); return err == nil && st.Size() > 0 }
		if err := waitAgents(ctx, procs, 20*time.Millisecond, sized, func(i int) string { return "made no region at " + shms[i] }); err != nil {
			return err
		}
		calibrated := func(i int) bool {
			st, err := host.NewMgmt(mgmts[i]).Status(ctx)
			return err == nil && len(st.Rails) > 0
		}
		if err := waitAgents(ctx, procs, 50*time.Millisecond, calibrated, func(int) string { return "did not calibrate its rail" }); err != nil {
			return err
		}
	}
	if o.net == "loopback" {
		port, err := freePorts(1)
		if err != nil {
			return err
		}
		root, where = fmt.Sprintf("127.0.0.1:%d", port[0]), "on loopback"
	}
	results := make(chan rankResult, 64)
	var ranks []*benchProc
	for r := range o.world {
		pl := places[r]
		argv := append(slices.Clone(pl.prefix), self, "coll", "rank", "--root", root, "--rank", strconv.Itoa(r),
			"--world", strconv.Itoa(o.world), "--key-file", keyFile, "--rails", strings.Join(o.rails, ","), "--objective", o.objective, "--explain="+strconv.FormatBool(o.explain), "--op", o.kind,
			"--dtype", o.dtype, "--redop", o.redop, "--sizes", strings.Join(o.sizes, ","), "--iters", strconv.Itoa(o.iters),
			"--warmup", strconv.Itoa(o.warmup), "--deadline", o.deadline.String())
		if needAgents {
			argv = append(argv, "--agent-at", pl.agent)
			if pl.tokenFile != "" {
				argv = append(argv, "--token-file", pl.tokenFile)
			}
		}
		if pl.listen != "" {
			argv = append(argv, "--listen", pl.listen)
		}
		p := start(fmt.Sprintf("rank %d", r), coresOf(r), argv)
		if r == 0 {
			p.cmd.Stdout = &rowWriter{results: results}
		}
		if err := run(p); err != nil {
			return err
		}
		ranks = append(ranks, p)
	}
	// Print rows as rank 0 reports them; watch every process.
	if !a.jsonOut() {
		bound := "not bound to cores"
		if cores != nil {
			bound = "ranks bound to CPUs"
			for _, c := range cores {
				bound += fmt.Sprint(" ", c)
			}
		}
		fmt.Fprintf(a.out, "# %s of %s (%s) among %d ranks %s (%s), rails %s; %d iterations per size; float sums in %s\n",
			o.kind, o.dtype, o.redop, o.world, where, bound, strings.Join(o.rails, ", "), o.iters, coll.SumKernel())
		fmt.Fprintf(a.out, benchRow, "rail", "size", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wrong", "host-cpu(ms)", "auto's plan")
	}
	var rows []rankResult
	failed := make(chan *benchProc, len(procs))
	for _, p := range procs {
		go func() {
			<-p.done
			if p.err != nil {
				failed <- p
			}
		}()
	}
	var firstFail *benchProc
	var failAt time.Time
	var grace <-chan time.Time
	allDone := make(chan struct{})
	go func() {
		for _, r := range ranks {
			<-r.done
		}
		close(allDone)
	}()
	var plan string // auto's table, as rank 0 explained it
	show := func(res rankResult) {
		if res.Explain != "" {
			plan = res.Explain
			if a.jsonOut() {
				json.NewEncoder(a.out).Encode(res)
			}
			return
		}
		rows = append(rows, res)
		if a.jsonOut() {
			json.NewEncoder(a.out).Encode(res)
			return
		}
		fmt.Fprintf(a.out, benchRow, res.Rail, strconv.Itoa(res.Size), strconv.Itoa(res.Count), res.Type, res.Redop,
			fmt.Sprintf("%.1f", res.TimeUS), fmt.Sprintf("%.3f", res.AlgBW), fmt.Sprintf("%.3f", res.BusBW),
			strconv.FormatInt(res.Wrong, 10), fmt.Sprintf("%.3f", res.HostCPU), res.Plan)
	}
loop:
	for {
		select {
		case res := <-results:
			show(res)
		case p := <-failed:
			if firstFail == nil {
				// Give the others the deadline to notice on their own and
				// say which rank failed.
				firstFail, failAt = p, time.Now()
				wait := o.deadline + 2*time.Second
				if len(rows) == 0 {
					wait += 5 * time.Second // ranks starting: dialling their agents
				}
				grace = time.After(wait)
			}
		case <-allDone:
			// Every rank's Wait has returned, so rank 0's rows are all in
			// results (rowWriter).
			for {
				select {
				case res := <-results:
					show(res)
				default:
					break loop
				}
			}
		case <-grace:
			break loop
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if firstFail != nil {
		return benchFailure(firstFail, ranks, failAt, o.deadline)
	}
	for _, r := range rows {
		if r.Wrong != 0 {
			return fmt.Errorf("coll bench: %d wrong elements on the %s rail at %d bytes", r.Wrong, r.Rail, r.Size)
		}
	}
	if plan != "" && !a.jsonOut() {
		fmt.Fprintf(a.out, "# auto's plan by size (the planner's table after calibrating and tuning):\n%s", plan)
	}
	if o.plot != "" {
		if err := plotBusBW(o, rows); err != nil {
			return err
		}
		if !a.jsonOut() {
			fmt.Fprintf(a.out, "# busbw against size: %s\n", o.plot)
		}
	}
	return nil
}

// waitAgents waits, up to 20 s, until ready(i) holds for every agent i,
// looking every step; an agent that exits first ends the wait, and one
// still not ready is named with notYet(i).
func waitAgents(ctx context.Context, agents []*benchProc, step time.Duration, ready func(i int) bool, notYet func(i int) string) error {
	deadline := time.Now().Add(20 * time.Second)
	for i, a := range agents {
		for !ready(i) {
			select {
			case <-a.done:
				return fmt.Errorf("coll bench: %s exited starting: %v: %s", a.what, a.err, a.stderr.last())
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(step):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("coll bench: %s %s within 20s", a.what, notYet(i))
			}
		}
	}
	return nil
}

// benchRow is a row of the table, in nccl-tests' order.
const benchRow = "%5s %10s %9s %8s %5s %11s %11s %11s %6s %12s  %s\n"

// benchFailure says what failed: the first process that exited with an
// error, and what every rank said (each names the rank it lost), one line
// per rank on stderr and the first of them in the error.
func benchFailure(first *benchProc, ranks []*benchProc, at time.Time, deadline time.Duration) error {
	var lines []string
	hung := 0
	for _, r := range ranks {
		select {
		case <-r.done:
			if r.err != nil {
				if msg := strings.TrimSpace(r.stderr.last()); msg != "" {
					lines = append(lines, msg)
				} else {
					lines = append(lines, fmt.Sprintf("%s: %v", r.what, r.err))
				}
			}
		default:
			// A bug: keep its goroutines (SIGQUIT makes Go print them)
			// for the report.
			hung++
			r.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-r.done:
			case <-time.After(2 * time.Second):
			}
			dump := filepath.Join(os.TempDir(), fmt.Sprintf("hec-coll-hang-%d-%s.txt", os.Getpid(), strings.ReplaceAll(r.what, " ", "")))
			os.WriteFile(dump, r.stderr.bytes(), 0o644)
			lines = append(lines, fmt.Sprintf("%s: still running %v after the first failure (its goroutines: %s)", r.what,
				time.Since(at).Round(time.Millisecond), dump))
		}
	}
	for _, l := range lines {
		fmt.Fprintln(os.Stderr, "  "+l)
	}
	why := first.err.Error()
	if msg := strings.TrimSpace(first.stderr.last()); msg != "" && first.cmd.Path != "" && strings.HasPrefix(first.what, "rank") {
		why = msg
	}
	what := fmt.Sprintf("coll bench: %s failed (%s)", first.what, why)
	if hung > 0 {
		return fmt.Errorf("%s, and %d ranks did not notice within %v: a hang", what, hung, deadline+2*time.Second)
	}
	if len(lines) > 0 && !strings.HasPrefix(first.what, "rank") {
		return fmt.Errorf("%s; %s", what, lines[0])
	}
	return errors.New(what)
}

// tailBuffer keeps the last lines a process wrote.
// rowWriter, rank 0's stdout, hands each line that is a row (JSON) to
// results. As the command's Stdout, not a pipe read beside its Wait
// (which closes the pipe when the process exits and could drop the last
// rows unread), the process's Wait returns only after every line it wrote
// has been handed on.
type rowWriter struct {
	line    []byte
	results chan<- rankResult
}

// maxRowLine bounds a line rank 0 prints: longer ones are not rows.
const maxRowLine = 64 << 10

func (w *rowWriter) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(w.line)+len(rest) <= maxRowLine {
				w.line = append(w.line, rest...)
			} else {
				w.line = append(w.line[:0], '!') // too long: not a row
			}
			break
		}
		w.line = append(w.line, rest[:i]...)
		var res rankResult
		if json.Unmarshal(w.line, &res) == nil {
			w.results <- res
		}
		w.line, rest = w.line[:0], rest[i+1:]
	}
	return len(p), nil
}

type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 1<<20 {
		t.buf = t.buf[len(t.buf)-512<<10:]
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// last is the last non-empty line.
func (t *tailBuffer) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return lines[len(lines)-1]
}

// plotBusBW draws bus bandwidth against size, a line per rail.
func plotBusBW(o benchOptions, rows []rankResult) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s of %s, %d ranks", o.kind, o.dtype, o.world)
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = "busbw (GB/s)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var args []any
	for _, r := range o.rails {
		var pts plotter.XYs
		for _, row := range rows {
			if row.Rail == r {
				pts = append(pts, plotter.XY{X: float64(row.Size), Y: row.BusBW})
			}
		}
		if len(pts) > 0 {
			args = append(args, r, pts)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, o.plot); err != nil {
		return fmt.Errorf("--plot %s: %w", o.plot, err)
	}
	return nil
}
