package collbench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/rail"
)

// Options are a bench run's: what the ranks run (as coll bench's flags
// say) and where they run.
type Options struct {
	World              int
	Rails              []string // host, dpu, auto, in order
	Objective          string   // auto's: time or host-cpu
	Explain            bool     // rank 0 reports auto's table after tuning
	Kind, DType, Redop string
	Sizes              []string // as nccl-tests writes them: 8, 64K, 1M
	Iters, Warmup      int
	Hecd               string        // the agent binary (default: hecd beside the running binary, or on PATH)
	Deadline           time.Duration // a rank or agent silent this long is declared dead
	Net                string        // netns (root), loopback, or auto
	HostRate, DPURate  string        // tc rates of the two rails' links (netns)
	VMs                int           // the last VMs agents are arm64 VMs (netns)
	Bundle             string        // the VMs' image bundle
	Bind               bool          // each rank's processes on its share of the cores
	// Retune has auto measure and tune the rails again, even where the
	// state directory keeps tables for this topology; it keeps what it
	// measures.
	Retune bool
	// RankCommand runs one rank: the process is started with it and one
	// more argument, RankOptions.Arg, and must call RunRank (hecctl coll
	// rank).
	RankCommand []string
	// Stderr gets each rank's last words when one fails (default
	// os.Stderr).
	Stderr io.Writer
}

// Header is where the ranks run, reported once they are all started.
type Header struct {
	Where string  // "on loopback", "in network namespaces (cluster …)"
	Cores [][]int // each rank's CPUs; nil: not bound
}

// topology names what the rails' times depend on, for the tables auto
// keeps (host.MultiRail.Topology): where the ranks and agents run, the
// links' rates, the cores they may use. Net must be settled (Check).
func (o *Options) topology() string {
	return fmt.Sprintf("coll bench: net %s, host-rate %q, dpu-rate %q, vms %d, bound %v, cpus %d",
		o.Net, o.HostRate, o.DPURate, o.VMs, o.Bind, runtime.NumCPU())
}

// Check checks o and settles Net "auto" (netns as root, else loopback).
// Its errors are the user's: a flag to change.
func (o *Options) Check() error {
	if o.World < 1 || o.World > 64 {
		return fmt.Errorf("--world %d: want 1 to 64", o.World)
	}
	if _, err := rail.ParseObjective(o.Objective); err != nil {
		return err
	}
	k, err := coll.ParseKind(o.Kind)
	if err != nil || k == coll.KindBarrier {
		return fmt.Errorf("--op %s: want allreduce, reducescatter, allgather, broadcast, reduce or alltoall", o.Kind)
	}
	if _, err := coll.ParseDType(o.DType); err != nil {
		return err
	}
	if _, err := coll.ParseOp(o.Redop); err != nil {
		return err
	}
	if _, err := ParseSizes(o.Sizes); err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	if o.Iters < 1 || o.Warmup < 0 {
		return fmt.Errorf("--iters %d --warmup %d: want at least one timed iteration", o.Iters, o.Warmup)
	}
	if o.Deadline < 100*time.Millisecond {
		return fmt.Errorf("--deadline %v: want at least 100ms", o.Deadline)
	}
	if o.Net == "auto" {
		o.Net = "loopback"
		if os.Geteuid() == 0 {
			o.Net = "netns"
		}
	}
	switch o.Net {
	case "netns":
		if os.Geteuid() != 0 {
			return errors.New("--net netns: making network namespaces needs root (or --net loopback)")
		}
	case "loopback":
		if o.HostRate != "" || o.DPURate != "" || o.VMs != 0 {
			return errors.New("--host-rate, --dpu-rate and --vm need --net netns (root)")
		}
	default:
		return fmt.Errorf("--net %s: want netns, loopback or auto", o.Net)
	}
	if o.VMs < 0 || o.VMs > o.World {
		return fmt.Errorf("--vm %d: want 0 to --world (%d)", o.VMs, o.World)
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
func benchCluster(ctx context.Context, o Options, dir string, region int, env []string, cores [][]int) (*cluster.State, []rankPlace, string, error) {
	name := fmt.Sprintf("cb%d", os.Getpid()%1_000_000)
	st, err := cluster.Up(ctx, cluster.Options{Name: name, Agents: o.World, VMs: o.VMs, Bundle: o.Bundle, Hecd: o.Hecd,
		StateDir: filepath.Join(dir, "cluster"), Rates: map[int]string{0: o.DPURate},
		HostRail: true, HostRates: map[int]string{0: o.HostRate},
		AgentArgs: []string{"--region-size", strconv.Itoa(region), "--queue-pairs", "2",
			"--peer-deadline", o.Deadline.String(), "--log-level", "warn"},
		AgentEnv: env, AgentCPUs: cores})
	if err != nil {
		return nil, nil, "", fmt.Errorf("coll bench: %w", err)
	}
	places := make([]rankPlace, o.World)
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

// Run starts the ranks (and their agents) o asks for, runs the bench and
// reports as it goes: the header once every process is up, then each row
// as rank 0 reports it (auto's plan, with Explain, as a row of its own).
// A rank or agent that fails makes Run stop them all and return an error
// naming it, each rank's last words written to o.Stderr; a wrong element
// anywhere is an error too, after the rows.
func Run(ctx context.Context, o Options, header func(Header), row func(Row)) error {
	if err := o.Check(); err != nil {
		return err
	}
	if len(o.RankCommand) == 0 {
		return errors.New("coll bench: no command to run a rank with (Options.RankCommand)")
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	sizes, _ := ParseSizes(o.Sizes)
	needAgents := slices.Contains(o.Rails, rail.DPU) || slices.Contains(o.Rails, rail.Auto)
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
	var procs []*benchProc
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			<-p.done
		}
	}()
	share := coreShare(o.World)
	var cores [][]int // rank i's share of the cores, when bound
	if o.Bind {
		all, err := affinity.Allowed()
		if err != nil {
			return err
		}
		cores = affinity.Shares(all, o.World)
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
	places := make([]rankPlace, o.World)
	var root, where string
	if o.Net == "netns" {
		st, p, r, err := benchCluster(ctx, o, dir, region, share, cores)
		if err != nil {
			return err
		}
		defer cluster.Down(st.Name, st.Dir, nil)
		places, root = p, r
		where = fmt.Sprintf("in network namespaces (cluster %s", st.Name)
		if o.DPURate != "" || o.HostRate != "" {
			where += fmt.Sprintf("; links: agents %s, host rail %s", cmp.Or(o.DPURate, "unlimited"), cmp.Or(o.HostRate, "unlimited"))
		}
		if o.VMs > 0 {
			where += fmt.Sprintf("; %d arm64 VMs", o.VMs)
		}
		where += ")"
	}
	shms := make([]string, o.World)
	if needAgents && o.Net == "loopback" {
		hecd, err := cluster.FindHecd(o.Hecd)
		if err != nil {
			return err
		}
		ports, err := freePorts(2 * o.World) // the agents' peer layer, then their management API
		if err != nil {
			return err
		}
		var peers, mgmts []string
		for i, p := range ports[:o.World] {
			peers = append(peers, fmt.Sprintf("%d@127.0.0.1:%d", i+1, p))
			mgmts = append(mgmts, fmt.Sprintf("127.0.0.1:%d", ports[o.World+i]))
		}
		for i := range o.World {
			shms[i] = fmt.Sprintf("/dev/shm/hec-coll-%d-%d", os.Getpid(), i)
			state := filepath.Join(dir, fmt.Sprintf("agent%d", i))
			argv := []string{hecd, "--shm", shms[i], "--region-size", strconv.Itoa(region), "--queue-pairs", "2",
				"--tcp", "off", "--mgmt", mgmts[i], "--resp", "off", "--udp", "off", "--state-dir", state,
				"--peer", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--peers", strings.Join(peers, ","),
				"--node-id", strconv.Itoa(i + 1), "--cluster-key-file", keyFile, "--peer-deadline", o.Deadline.String(),
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
	if o.Net == "loopback" {
		port, err := freePorts(1)
		if err != nil {
			return err
		}
		root, where = fmt.Sprintf("127.0.0.1:%d", port[0]), "on loopback"
	}
	results := make(chan Row, 64)
	var ranks []*benchProc
	for r := range o.World {
		pl := places[r]
		ro := RankOptions{Root: root, Rank: r, World: o.World, KeyFile: keyFile, Rails: o.Rails, Objective: o.Objective,
			Explain: o.Explain, Kind: o.Kind, DType: o.DType, Redop: o.Redop, Sizes: o.Sizes, Iters: o.Iters,
			Warmup: o.Warmup, Deadline: o.Deadline, Listen: pl.listen, Topology: o.topology(), Retune: o.Retune}
		if needAgents {
			ro.Agent, ro.TokenFile = pl.agent, pl.tokenFile
		}
		argv := append(append(slices.Clone(pl.prefix), o.RankCommand...), ro.Arg())
		p := start(fmt.Sprintf("rank %d", r), coresOf(r), argv)
		if r == 0 {
			p.cmd.Stdout = &rowWriter{results: results}
		}
		if err := run(p); err != nil {
			return err
		}
		ranks = append(ranks, p)
	}
	// Report rows as rank 0 reports them; watch every process.
	if header != nil {
		header(Header{Where: where, Cores: cores})
	}
	var rows []Row
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
	show := func(res Row) {
		if res.Explain == "" {
			rows = append(rows, res)
		}
		if row != nil {
			row(res)
		}
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
				wait := o.Deadline + 2*time.Second
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
		return benchFailure(stderr, firstFail, ranks, failAt, o.Deadline)
	}
	for _, r := range rows {
		if r.Wrong != 0 {
			return fmt.Errorf("coll bench: %d wrong elements on the %s rail at %d bytes", r.Wrong, r.Rail, r.Size)
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

// benchFailure says what failed: the first process that exited with an
// error, and what every rank said (each names the rank it lost), one line
// per rank on stderr and the first of them in the error.
func benchFailure(stderr io.Writer, first *benchProc, ranks []*benchProc, at time.Time, deadline time.Duration) error {
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
		fmt.Fprintln(stderr, "  "+l)
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
	results chan<- Row
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
		var res Row
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
