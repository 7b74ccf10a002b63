package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hecsys/hec/host/collbench"
	"github.com/hecsys/hec/test/testutil"
)

// The coll scenario (issue: collectives reduced by the DPUs): allreduce of
// float32 among N = 2 and 4 ranks on loopback, each rank a host process
// with an agent of its own (hecctl coll bench), on the host rail (the
// host processes among themselves) and on the DPU rail (the agents among
// themselves, the hosts handing their buffers over), beside Open MPI's
// MPI_Allreduce (test/bench/mpi/allreduce.c, Debian's openmpi-bin) over
// TCP on loopback and over shared memory, on the same machine, in the
// same run, interleaved, timed the same way (a barrier, the call; the
// slowest rank's mean). Host CPU per allreduce is the ranks' own (an
// agent's is the DPU's).
func benchColl(ctx context.Context, rep *Report, quick bool) error {
	const s = "coll"
	for _, bin := range []string{"mpirun", "mpicc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (make bench installs openmpi-bin and libopenmpi-dev as root): %w", bin, err)
		}
	}
	dir, hecd, hecctl, err := collBinaries("coll")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	mpiBin := filepath.Join(dir, "mpi_allreduce")
	src := filepath.Join(testutil.ModuleRoot(), "test", "bench", "mpi", "allreduce.c")
	if out, err := exec.Command("mpicc", "-O2", "-o", mpiBin, src).CombinedOutput(); err != nil {
		return fmt.Errorf("mpicc: %v: %s", err, out)
	}
	// Timed iterations per size, the same for both: twenty (nccl-tests'
	// default) at 16 MiB, where with five a row's mean was a few
	// milliseconds of ops and Open MPI's was still warming up (its
	// 1 MiB busbw over TCP rose from about 0.55 to 1.1-1.9 GB/s with
	// twenty); two hundred at 1 MiB, whose twenty ops are some 10 ms,
	// where a row moved by half from one repetition to the next (Open
	// MPI's over TCP 2.30-4.12 GB/s, the DPU rail's 0.86-1.41) and with
	// two hundred, some 80 ms, still by a fifth (the DPU rail's mean over
	// two hundred 382-449 µs, over a thousand 338-348 µs, alternated):
	// five hundred, the half of a thousand that fits make bench's 15
	// minutes (a thousand took 16 s of each four-rank repetition's 36);
	// five at 64 MiB, whose ops take up to half a second. The split's
	// rate-limited 16 MiB ops take most of a second each: five. A quick
	// run: two ranks, five of 1 and 16 MiB, in one run per path, and not
	// the split.
	groups := []struct {
		iters int
		sizes []int
	}{{500, []int{1 << 20}}, {20, []int{16 << 20}}, {5, []int{64 << 20}}}
	reps, splitIters := 3, 5
	if quick {
		groups, reps = groups[:1], 1
		groups[0].iters, groups[0].sizes = 5, []int{1 << 20, 16 << 20}
	}
	var sizes []int
	for _, g := range groups {
		sizes = append(sizes, g.sizes...)
	}
	worlds := []int{2, 4}
	if quick {
		worlds = worlds[:1]
	}
	busbw := map[collKey][]float64{}
	cpu := map[collKey][]float64{}
	for rep := range reps {
		for _, n := range worlds {
			progress(s, "repetition %d of %d: %d ranks", rep+1, reps, n)
			for _, g := range groups {
				if err := collRound(ctx, hecctl, hecd, mpiBin, n, g.iters, g.sizes, busbw, cpu); err != nil {
					return err
				}
			}
		}
	}
	for _, n := range worlds {
		for _, z := range sizes {
			label := fmt.Sprintf("N=%d %s", n, sizeName(z))
			for _, p := range []string{"host", "dpu", "mpi-tcp", "mpi-shm"} {
				rep.addN(s, fmt.Sprintf("%s busbw, %s", label, p), busbw[collKey{n, p, z}], "GB/s")
				rep.addN(s, fmt.Sprintf("%s host CPU per allreduce, %s", label, p), cpu[collKey{n, p, z}], "ms")
			}
			for _, p := range []string{"host", "dpu"} {
				rep.atLeastN(s, fmt.Sprintf("%s busbw: %s rail / Open MPI over TCP", label, p),
					ratio(busbw[collKey{n, p, z}], busbw[collKey{n, "mpi-tcp", z}]), 1.0, "×")
			}
			rep.atMostN(s, fmt.Sprintf("%s host CPU per allreduce: DPU rail / host rail", label),
				ratio(cpu[collKey{n, "dpu", z}], cpu[collKey{n, "host", z}]), 0.2, "×")
		}
	}
	if quick {
		// Its namespaces, links and agents take 16 s to set up, the most
		// of any one check: make bench alone runs it.
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the coll scenario's split across rate-limited rails makes network namespaces: run make bench as root")
	}
	// The split's repetitions set up namespaces, links and agents again
	// (23 s each): two.
	return benchCollSplit(ctx, rep, hecctl, hecd, min(reps, 2), splitIters)
}

// collKey names a row: ranks, rail or peer, size.
type collKey struct {
	n    int
	path string
	size int
}

// collRound runs hecctl coll bench and Open MPI (over TCP and over shared
// memory) once each for n ranks, iters timed iterations of sizes, and adds
// their rows to busbw and cpu.
func collRound(ctx context.Context, hecctl, hecd, mpiBin string, n, iters int, sizes []int, busbw, cpu map[collKey][]float64) error {
	var sizeArgs []string
	for _, z := range sizes {
		sizeArgs = append(sizeArgs, strconv.Itoa(z))
	}
	// The host rail runs alone, as Open MPI does: in one run with the dpu
	// rail it would share this machine's cores with N agents that, on a
	// node with DPUs, run on the DPUs' own cores.
	var rows []collRow
	for _, rail := range []string{"host", "dpu"} {
		r, err := runCollBench(ctx, hecctl, hecd, n, iters, rail, sizeArgs)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	for _, r := range rows {
		if r.Wrong != 0 {
			return fmt.Errorf("hecctl coll bench: %d wrong elements, %s rail, %d bytes", r.Wrong, r.Rail, r.Size)
		}
		k := collKey{n, r.Rail, r.Size}
		busbw[k] = append(busbw[k], r.BusBW)
		cpu[k] = append(cpu[k], r.HostCPU)
	}
	for _, btl := range []string{"tcp", "shm"} {
		mrows, err := runMPI(ctx, mpiBin, n, iters, btl, sizeArgs)
		if err != nil {
			return err
		}
		for _, r := range mrows {
			k := collKey{n, "mpi-" + btl, r.size}
			busbw[k] = append(busbw[k], r.busbw)
			cpu[k] = append(cpu[k], r.cpuMS)
		}
	}
	return nil
}

// benchCollSplit: two ranks in namespaces, the host rail's links limited
// to 200 Mbit/s and the agents' to 400 Mbit/s (tc), allreduce on each rail
// and split between them (--rails auto, the planner's shares): the split's
// bus bandwidth against the sum of the two rails', and the host rail's
// share (a third, were the planner exact).
func benchCollSplit(ctx context.Context, rep *Report, hecctl, hecd string, reps, iters int) error {
	const s = "coll"
	var sum, share []float64
	for r := range reps {
		progress(s, "split across rate-limited rails, repetition %d of %d", r+1, reps)
		rows, err := collBenchRows(ctx, hecctl, hecd, "--net", "netns", "--world", "2", "--rails", "host,dpu,auto",
			"--host-rate", "200mbit", "--dpu-rate", "400mbit", "--sizes", "16M", "--iters", strconv.Itoa(iters))
		if err != nil {
			return err
		}
		bw := map[string]float64{}
		for _, row := range rows {
			if row.Wrong != 0 {
				return fmt.Errorf("hecctl coll bench: %d wrong elements, %s rail", row.Wrong, row.Rail)
			}
			bw[row.Rail] = row.BusBW
			if row.Rail == "auto" {
				share = append(share, row.HostFrac)
			}
		}
		sum = append(sum, bw["auto"]/(bw["host"]+bw["dpu"]))
	}
	rep.addN(s, "N=2 16 MiB split, host rail 200 Mbit/s beside agents 400 Mbit/s: host rail's share", share, "")
	rep.atLeastN(s, "N=2 16 MiB busbw: split / (host rail + DPU rail), rails 1:2 by tc", sum, 0.85, "×")
	return nil
}

func sizeName(z int) string {
	if z >= 1<<20 {
		return fmt.Sprintf("%d MiB", z>>20)
	}
	return fmt.Sprintf("%d KiB", z>>10)
}

// collRow is a row of hecctl coll bench -o json: the CLI's own type.
type collRow = collbench.Row

// collWarmup is the untimed iterations of each size before the timed
// ones, for our rails and for Open MPI alike: nccl-tests' default (its
// -w), whose iterations (-n 20) and table the bench already follows.
const collWarmup = 5

// runCollBench runs coll bench on loopback, the topology Open MPI's runs
// here have.
func runCollBench(ctx context.Context, hecctl, hecd string, n, iters int, rails string, sizes []string) ([]collRow, error) {
	return collBenchRows(ctx, hecctl, hecd, "--net", "loopback", "--world", strconv.Itoa(n), "--rails", rails,
		"--sizes", strings.Join(sizes, ","), "--iters", strconv.Itoa(iters), "--warmup", strconv.Itoa(collWarmup))
}

// collBenchRows runs hecctl coll bench with args and returns its rows.
func collBenchRows(ctx context.Context, hecctl, hecd string, args ...string) ([]collRow, error) {
	state, err := os.MkdirTemp("", "hec-bench-state")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	return collBenchRowsIn(ctx, state, hecctl, hecd, args...)
}

// collBenchRowsIn is collBenchRows with XDG_STATE_HOME at state, where
// auto keeps its tables and the host rail its model: nothing of a
// user's or an earlier run's is taken.
func collBenchRowsIn(ctx context.Context, state, hecctl, hecd string, args ...string) ([]collRow, error) {
	cmd := exec.CommandContext(ctx, hecctl, append([]string{"coll", "bench", "-o", "json", "--hecd", hecd}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hecctl coll bench %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var rows []collRow
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r collRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("hecctl coll bench: %q: %w", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

type mpiRow struct {
	size         int
	busbw, cpuMS float64
}

func runMPI(ctx context.Context, bin string, n, iters int, btl string, sizes []string) ([]mpiRow, error) {
	// A run of ours takes seconds: one that hangs (a rank stuck in
	// mpirun's launch, say) ends the scenario with an error, not make bench.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// Bound as hecctl coll bench binds our ranks: each to a core where
	// they fit, else round robin (mpirun's default leaves ranks that
	// outnumber the cores unbound).
	args := []string{"--oversubscribe", "--bind-to", "core:overload-allowed", "--map-by", "core", "-np", strconv.Itoa(n), "--mca", "pml", "ob1"}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	if btl == "tcp" {
		args = append(args, "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo")
	} else {
		args = append(args, "--mca", "btl", "vader,self")
	}
	args = append(append(args, bin, strconv.Itoa(iters), strconv.Itoa(collWarmup)), sizes...)
	out, err := exec.CommandContext(ctx, "mpirun", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("mpirun (%s): %v: %s", btl, err, out)
	}
	var rows []mpiRow
	for _, line := range strings.Split(string(out), "\n") {
		var size, wrong int
		var t, c float64
		if _, err := fmt.Sscanf(line, "%d %g %g %d", &size, &t, &c, &wrong); err != nil {
			continue
		}
		if wrong != 0 {
			return nil, fmt.Errorf("open MPI (%s): %d wrong elements at %d bytes", btl, wrong, size)
		}
		rows = append(rows, mpiRow{size: size, busbw: float64(size) / t / 1e9 * 2 * float64(n-1) / float64(n), cpuMS: c * 1e3})
	}
	if len(rows) != len(sizes) {
		return nil, fmt.Errorf("open MPI (%s) printed %d of %d sizes: %s", btl, len(rows), len(sizes), out)
	}
	return rows, nil
}

// benchCollAuto (issue: composition that never loses): four and two
// ranks on loopback, each a host process and an agent of its own on this
// machine's cores — the rails share them, the case where the fixed split
// lost at every size — allreduce of 8 B, 64 KiB, 1 MiB, 16 MiB and 64 MiB
// on the host rail, the DPU rail and auto, each size on every rail in
// turn (each repetition in another order): the first repetition has auto
// calibrate and tune (as a job's first collectives tune it), the second
// takes the table the first kept. Checked: auto's busbw over the better
// single rail's at each size (≥ 0.95) and auto's time against its
// prediction (within 10 %); with --objective host-cpu the host CPU per
// allreduce is reported beside time's.
func benchCollAuto(ctx context.Context, rep *Report, quick bool) error {
	const s = "coll-auto"
	dir, hecd, hecctl, err := collBinaries("coll-auto")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The tables auto keeps (and the host rail's model) in a state
	// directory of the scenario's own: nothing of a user's or an earlier
	// run's is taken.
	state := filepath.Join(dir, "state")
	// Small sizes take microseconds: many iterations; 16 MiB twelve, 64
	// MiB six. As many untimed first: a rail measured right after the DPU
	// rail's iterations with five untimed ones ran a fifth slower than
	// in second place (64 KiB: 486 µs against 405, four runs each), with
	// three hundred alike (343 against 344). The timed iterations
	// interleave the rails in their six orders by turns (coll bench):
	// a multiple of six, so that each rail follows each other as often —
	// with five at 64 MiB, auto running the host rail alone took 170 ms
	// against the host rail's 153; with six, 147–186 against 147–192.
	type group struct {
		iters, warmup int
		sizes         []string
	}
	// 64 MiB: three untimed of each rail, auto's tuning before them.
	groups := []group{{300, 300, []string{"8", "64K"}}, {42, 42, []string{"1M"}}, {12, 12, []string{"16M"}}, {6, 3, []string{"64M"}}}
	type run struct {
		world     int
		objective string
		reps      int
		groups    []group
	}
	// Objective time on 4 and 2 ranks, twice: the first repetition
	// measures and tunes (--retune: one-shot, as a job's first
	// collectives), the second takes the table the first kept (after
	// learning). host-cpu's figures are reported, not checked: once, on 4
	// ranks, 64 KiB to 16 MiB in one run (a third repetition and
	// host-cpu's second took 25 s of make bench's 15 minutes, host-cpu
	// run as time is, 14 s).
	runs := []run{{4, "time", 2, groups}, {2, "time", 2, groups}, {4, "host-cpu", 1, []group{{12, 12, []string{"64K", "1M", "16M"}}}}}
	if quick { // every size in one run, 4 ranks, objective time
		runs = []run{{4, "time", 1, []group{{6, 6, []string{"8", "64K", "1M", "16M"}}}}}
	}
	type key struct {
		world           int
		objective, rail string
		size            int
	}
	busbw, cpu, predOff := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	var sizes []int
	for _, ru := range runs {
		for r := range ru.reps {
			progress(s, "N=%d, objective %s, repetition %d of %d", ru.world, ru.objective, r+1, ru.reps)
			for _, g := range ru.groups {
				// Each repetition a rail in another place of the turn: what
				// running after another rail costs falls on each alike.
				order := []string{"host", "dpu", "auto"}
				order = append(order[r%3:], order[:r%3]...)
				args := []string{"--net", "loopback", "--world", strconv.Itoa(ru.world), "--rails", strings.Join(order, ","),
					"--objective", ru.objective, "--sizes", strings.Join(g.sizes, ","), "--iters", strconv.Itoa(g.iters),
					"--warmup", strconv.Itoa(g.warmup)}
				if r == 0 {
					args = append(args, "--retune")
				}
				rows, err := collBenchRowsIn(ctx, state, hecctl, hecd, args...)
				if err != nil {
					return err
				}
				for _, row := range rows {
					if row.Wrong != 0 {
						return fmt.Errorf("hecctl coll bench: %d wrong elements, %s rail, %d bytes", row.Wrong, row.Rail, row.Size)
					}
					k := key{ru.world, ru.objective, row.Rail, row.Size}
					busbw[k], cpu[k] = append(busbw[k], row.BusBW), append(cpu[k], row.HostCPU)
					if row.Rail == "auto" && row.PredictedUS > 0 {
						predOff[k] = append(predOff[k], abs(row.TimeUS/row.PredictedUS-1))
					}
					if row.Rail == "auto" && !slices.Contains(sizes, row.Size) {
						sizes = append(sizes, row.Size)
					}
				}
			}
		}
	}
	for _, ru := range runs {
		for _, z := range sizes {
			host, dpu, auto := busbw[key{ru.world, ru.objective, "host", z}], busbw[key{ru.world, ru.objective, "dpu", z}], busbw[key{ru.world, ru.objective, "auto", z}]
			if len(auto) == 0 {
				continue
			}
			best := make([]float64, min(len(host), len(dpu)))
			for i := range best {
				best[i] = max(host[i], dpu[i])
			}
			label := fmt.Sprintf("N=%d %d bytes, objective %s", ru.world, z, ru.objective)
			for _, p := range []string{"host", "dpu", "auto"} {
				rep.addN(s, fmt.Sprintf("%s host CPU per allreduce, %s", label, p), cpu[key{ru.world, ru.objective, p, z}], "ms")
			}
			if ru.objective != "time" {
				rep.addN(s, fmt.Sprintf("%s busbw: auto / the better single rail", label), ratio(auto, best), "×")
				continue
			}
			// The picture's bars: each rail's busbw over the better single
			// rail's, by size.
			for _, p := range []string{"host", "dpu", "auto"} {
				rep.addN(s, collAutoMetric(ru.world, collSizeName(z), p), ratio(busbw[key{ru.world, ru.objective, p, z}], best), "×")
			}
			rep.atLeastN(s, fmt.Sprintf("%s busbw: auto / the better single rail", label), ratio(auto, best), 0.95, "×")
			if off := predOff[key{ru.world, ru.objective, "auto", z}]; len(off) > 0 {
				rep.atMostN(s, fmt.Sprintf("%s: |auto's time / its prediction − 1|", label), off, 0.10, "")
			}
		}
	}
	return nil
}

// collSizeName is z in the unit the coll-auto pictures label sizes with.
func collSizeName(z int) string {
	if z < 1<<10 {
		return fmt.Sprintf("%d B", z)
	}
	return sizeName(z)
}

// collBinaries is a scratch directory with an agent for scenario name
// (scratchHecd) and the CLI that drives coll bench; the caller removes
// dir.
func collBinaries(name string) (dir, hecd, hecctl string, err error) {
	if dir, hecd, err = scratchHecd(name); err != nil {
		return "", "", "", err
	}
	if hecctl, err = testutil.Build("./host/cmd/hecctl"); err != nil {
		os.RemoveAll(dir)
		return "", "", "", err
	}
	return dir, hecd, hecctl, nil
}
