package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/test/testutil"
)

// The torch scenario (issue 57): a PyTorch DDP training step on HEC's DPU
// rail (the "hec" backend: the ranks' agents reduce the gradient buckets)
// beside gloo, in the same run, on 2 and 4 ranks, for transformer language
// models of about 10 M and 50 M parameters (test/bench/torch/ddp_step.py
// under torchrun, Debian's python3-torch): the step's time (median of 8
// after 2 warm-up steps; the slowest rank's) and the host CPU a step
// spends communicating: the rank process's CPU per step less its CPU per
// step under no_sync (the same forward, backward and optimizer step with no
// reduction; four of them), averaged over the ranks. An agent's CPU is the DPU's and is
// not counted. Also all_to_all_single (expert parallelism's exchange) of 1
// and 16 MiB. The batch is one sequence of 8 tokens: Debian's torch 1.13 runs
// its matrix products on the generic BLAS, so compute is slow, and a step
// of 8 tokens keeps the gradients' reduction a visible part of it.
func benchTorch(ctx context.Context, rep *Report, quick bool) error {
	const s = "torch"
	py, err := testutil.TorchPython()
	if err != nil {
		return err
	}
	dir, hecd, err := scratchHecd("torch")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lib, err := testutil.BuildLibhec(dir, "c-shared")
	if err != nil {
		return err
	}
	type model struct {
		name        string
		dim, layers int
	}
	// Eight timed steps, not twenty: the 50M model's runs took 254 s of
	// the scenario's 327 with twenty, over make bench's 15 minutes.
	worlds, models, steps := []int{2, 4}, []model{{"10M", 512, 3}, {"50M", 1024, 4}}, ddpSteps{warmup: 2, timed: 8, nosync: 4}
	if quick {
		worlds, models, steps = worlds[:1], models[:1], ddpSteps{warmup: 2, timed: 4, nosync: 3}
	}
	for _, world := range worlds {
		progress(s, "%d ranks: starting %d agents", world, world)
		targets, stop, err := startPeerAgents(ctx, hecd, filepath.Join(dir, fmt.Sprint("agents", world)), world)
		if err != nil {
			return err
		}
		for i, m := range models {
			a2a := ""
			if i == 0 {
				a2a = "1048576,16777216"
			}
			res := map[string][]torchRank{}
			for _, backend := range []string{"gloo", "hec"} {
				progress(s, "%d ranks, %s model: %s", world, m.name, backend)
				r, err := runDDPStep(ctx, py, lib, targets, world, backend, steps, m.dim, m.layers, a2a)
				if err != nil {
					stop()
					return fmt.Errorf("%d ranks, %s model, %s: %w", world, m.name, backend, err)
				}
				res[backend] = r
			}
			label := fmt.Sprintf("N=%d %s model", world, m.name)
			step, cpu := map[string][]float64{}, map[string][]float64{}
			for b, ranks := range res {
				step[b], cpu[b] = stepTimes(ranks), commCPU(ranks)
				rep.addN(s, fmt.Sprintf("%s (%d params) DDP step, %s", label, ranks[0].Params, b), step[b], "ms")
				rep.addN(s, fmt.Sprintf("%s host CPU communicating per step, %s", label, b), cpu[b], "ms")
			}
			rep.atMostN(s, label+" DDP step: hec (DPU rail) / gloo", ratio(step["hec"], step["gloo"]), 1.0, "×")
			rep.atMostN(s, label+" host CPU communicating per step: hec / gloo", ratio(cpu["hec"], cpu["gloo"]), 0.2, "×")
			if a2a == "" {
				continue
			}
			for _, z := range []string{"1048576", "16777216"} {
				t := map[string][]float64{}
				for b, ranks := range res {
					t[b] = a2aTimes(ranks, z)
					rep.addN(s, fmt.Sprintf("N=%d all_to_all_single %s, %s", world, sizeName(atoi(z)), b), t[b], "ms")
				}
				rep.atMostN(s, fmt.Sprintf("N=%d all_to_all_single %s: hec / gloo", world, sizeName(atoi(z))), ratio(t["hec"], t["gloo"]), 1.0, "×")
			}
		}
		stop()
	}
	return nil
}

// torchRank is what one rank of ddp_step.py prints: per timed step its
// wall and process CPU seconds, likewise under no_sync, and per
// all_to_all_single size its calls'.
type torchRank struct {
	Rank   int                     `json:"rank"`
	Params int                     `json:"params"`
	Step   [][2]float64            `json:"step"`
	NoSync [][2]float64            `json:"nosync"`
	A2A    map[string][][2]float64 `json:"a2a"`
}

// stepTimes are the steps' times in ms, each the slowest rank's.
func stepTimes(ranks []torchRank) []float64 {
	out := make([]float64, len(ranks[0].Step))
	for _, r := range ranks {
		for i, t := range r.Step {
			out[i] = max(out[i], 1e3*t[0])
		}
	}
	return out
}

// commCPU are the steps' host CPU in ms beyond a step's under no_sync
// (each rank's median of those), averaged over the ranks.
func commCPU(ranks []torchRank) []float64 {
	out := make([]float64, len(ranks[0].Step))
	for _, r := range ranks {
		var local []float64
		for _, t := range r.NoSync {
			local = append(local, t[1])
		}
		slices.Sort(local)
		base := local[len(local)/2]
		for i, t := range r.Step {
			out[i] += 1e3 * (t[1] - base) / float64(len(ranks))
		}
	}
	return out
}

// a2aTimes are all_to_all_single's calls of size z in ms, each the slowest rank's.
func a2aTimes(ranks []torchRank, z string) []float64 {
	out := make([]float64, len(ranks[0].A2A[z]))
	for _, r := range ranks {
		for i, t := range r.A2A[z] {
			out[i] = max(out[i], 1e3*t[0])
		}
	}
	return out
}

// runDDPStep runs ddp_step.py on world ranks under torchrun and returns
// each rank's figures.
// ddpSteps are a run's steps: untimed first, timed, and timed under
// no_sync (after two untimed).
type ddpSteps struct{ warmup, timed, nosync int }

func runDDPStep(ctx context.Context, py, lib string, targets []string, world int, backend string, steps ddpSteps, dim, layers int, a2a string) ([]torchRank, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	script := filepath.Join(testutil.ModuleRoot(), "test", "bench", "torch", "ddp_step.py")
	out, err := os.MkdirTemp("", "hec-bench-ddp")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	cmd := exec.CommandContext(ctx, py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", fmt.Sprint(world),
		"--redirects", "2", "--tee", "2", script, "--backend", backend, "--dim", fmt.Sprint(dim), "--layers", fmt.Sprint(layers),
		"--warmup", fmt.Sprint(steps.warmup), "--steps", fmt.Sprint(steps.timed), "--nosync", fmt.Sprint(steps.nosync),
		"--a2a", a2a, "--out", out)
	cmd.Env = append(os.Environ(), "HEC_LIB="+lib, "HEC_AGENT="+strings.Join(targets, ","), "OMP_NUM_THREADS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("torchrun: %v\n%s", err, out)
	}
	ranks := make([]torchRank, world)
	for i := range ranks {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank-%d.json", i)))
		if err != nil {
			return nil, fmt.Errorf("rank %d's figures: %w", i, err)
		}
		r := &ranks[i]
		if err := json.Unmarshal(b, r); err != nil || r.Rank != i || len(r.Step) == 0 || len(r.NoSync) == 0 {
			return nil, fmt.Errorf("rank %d's figures %.200q: %v", i, b, err)
		}
	}
	return ranks, nil
}

// startPeerAgents starts n agents that are peers of one another, each a
// process of its own with its region, and returns their targets.
func startPeerAgents(ctx context.Context, hecd, dir string, n int) (targets []string, stop func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	key := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(key, []byte("bench-torch-cluster-key-0123456789"), 0o600); err != nil {
		return nil, nil, err
	}
	addrs, err := testutil.FreeLoopbackAddrs(2 * n)
	if err != nil {
		return nil, nil, err
	}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("%d@%s", i+1, addrs[i]))
	}
	var cmds []*exec.Cmd
	var shms []string
	stop = func() {
		for _, c := range cmds {
			c.Process.Signal(os.Interrupt)
		}
		for _, c := range cmds {
			c.Wait()
		}
		for _, s := range shms {
			os.Remove(s)
		}
	}
	for i := range n {
		shm := shmPath(fmt.Sprintf("torch-%d", i+1))
		cmd := exec.Command(hecd, "--shm", shm, "--region-size", "134217728", "--queue-pairs", "4", "--tcp", "off",
			"--resp", "off", "--udp", "off", "--mgmt", addrs[n+i], "--state-dir", filepath.Join(dir, fmt.Sprint("agent", i+1)),
			"--peer", addrs[i], "--peers", strings.Join(peers, ","), "--node-id", fmt.Sprint(i+1),
			"--cluster-key-file", key, "--log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		cmds, shms = append(cmds, cmd), append(shms, shm)
		targets = append(targets, "shm://"+shm)
		mgmt := host.NewMgmt(addrs[n+i])
		for deadline := time.Now().Add(30 * time.Second); ; {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := mgmt.Status(sctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				stop()
				return nil, nil, fmt.Errorf("agent %d not serving after 30 s: %w", i+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return targets, stop, nil
}
