package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/trace"
)

// The rails scenario (issue: rails): a 256 MiB checksum split by the
// planner between this process's CPU (the host rail, pinned to the first
// core) and hecd running the bf2 DPU profile (its own core, a CPU quota, no
// AVX), the buffer in the queue pair's window. It reports the planner's
// prediction, the time achieved, each single rail's time and the host
// CPU-seconds used, all from this run.

// pinAll pins every thread of this process to cpus and returns the CPUs
// to restore (setAll).
func pinAll(cpus ...int) ([]int, error) {
	old, err := affinity.Allowed()
	if err != nil {
		return nil, err
	}
	return old, affinity.PinProcess(cpus)
}

func setAll(cpus []int) error { return affinity.PinProcess(cpus) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func benchRails(ctx context.Context, rep *Report, quick bool) error {
	const s = "rails"
	const size = 256 << 20
	runs, learnRuns := 9, 10
	if quick {
		runs = 3
	}
	dir, hecd, err := scratchHecd("rails")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	shm := shmPath("rails")
	defer os.Remove(shm)
	const mgmt = "127.0.0.1:26420"
	cmd := exec.Command(hecd, "--shm", shm, "--region-size", strconv.Itoa(640<<20), "--queue-pairs", "2",
		"--tcp", "off", "--resp", "off", "--udp", "off", "--mgmt", mgmt, "--state-dir", filepath.Join(dir, "state"),
		"--dpu-profile", "bf2", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	// Ready, and its own background calibration done (it would disturb).
	if err := calibrated(ctx, mgmt, "hecd"); err != nil {
		return err
	}
	old, err := pinAll(0) // the host rail: the first core; the agent has the last
	if err != nil {
		return err
	}
	defer setAll(old)

	rec := trace.NewRecorder(0) // off but for the traced splits at the end
	c, err := host.Dial(ctx, "shm://"+shm, host.WithTrace(rec))
	if err != nil {
		return err
	}
	defer c.Close()
	buf, err := c.Alloc(size)
	if err != nil {
		return fmt.Errorf("alloc 256 MiB in the window: %w", err)
	}
	defer c.Free(buf)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
	want := crc32c.Checksum(buf)

	// Each rail alone first, then the split: calibrated, settled by a few
	// splits (the model learns from each), then measured with the settled
	// model. Splits run back to back, as a stream of them would.
	hostOnly, dpuOnly, split := make([]time.Duration, runs), make([]time.Duration, runs), make([]time.Duration, runs)
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		if crc32c.Checksum(buf) != want {
			return fmt.Errorf("host crc differs")
		}
		hostOnly[i] = time.Since(t0)
		t0 = time.Now()
		got, err := c.Checksum(ctx, buf)
		if err != nil || got != want {
			return fmt.Errorf("agent checksum %08x, %v; want %08x", got, err, want)
		}
		dpuOnly[i] = time.Since(t0)
	}
	// One-shot: what `hecctl checksum --rails auto` does, a first call
	// with rails calibrated just before it and nothing learned.
	var oneShot, oneShotPred []time.Duration
	splits := 0
	for i := 0; i < 3; i++ {
		cal, err := c.CalibrateChecksum(ctx, buf)
		if err != nil {
			return err
		}
		t0 := time.Now()
		got, d, err := c.ChecksumAuto(ctx, buf, cal)
		oneShot = append(oneShot, time.Since(t0))
		if err != nil || got != want {
			return fmt.Errorf("one-shot checksum %08x, %v; want %08x", got, err, want)
		}
		oneShotPred = append(oneShotPred, d.Predicted)
		if d.Choice == "split" {
			splits++
		}
		progress(s, "one-shot %d: %v on %s (predicted %v): %s", i+1, oneShot[i].Round(time.Microsecond), d.Choice, d.Predicted.Round(time.Microsecond), d.Reason)
	}
	rails, err := c.CalibrateChecksum(ctx, buf)
	if err != nil {
		return err
	}
	model := c.NewChecksumModel(rails)
	for i := 0; i < learnRuns; i++ {
		if got, _, err := model.Checksum(ctx, buf); err != nil || got != want {
			return fmt.Errorf("split checksum %08x, %v; want %08x", got, err, want)
		}
	}
	rails = model.Rails()
	plan := rail.Split(rails, size, 4096)
	var hostCPU time.Duration
	for i := 0; i < runs; i++ {
		cpu0 := cpuTime()
		t0 := time.Now()
		got, _, err := c.ChecksumSplit(ctx, buf, rails)
		split[i] = time.Since(t0)
		hostCPU += cpuTime() - cpu0
		if err != nil || got != want {
			return fmt.Errorf("split checksum %08x, %v; want %08x", got, err, want)
		}
	}
	// Where a split's time went, recorded: each rail's share against the
	// planner's time for it, and the agent's share as the ops it was
	// handed in (hecctl trace summary's rows).
	end := rec.Begin()
	for i := 0; i < runs; i++ {
		if got, _, err := c.ChecksumSplit(ctx, buf, rails); err != nil || got != want {
			end()
			return fmt.Errorf("split checksum %08x, %v; want %08x", got, err, want)
		}
	}
	end()
	spans, _ := rec.Since(0)
	reportStages(rep, s, "256 MiB split", spans, trace.StageOp, trace.StageShare+" "+rail.Host, trace.StagePredicted+" "+rail.Host,
		trace.StageShare+" "+rail.DPU, trace.StagePredicted+" "+rail.DPU)
	// The learned model's split by size, against each rail alone: GB/s,
	// predicted and achieved (the picture rails-sizes.png).
	for _, z := range []int{16 << 20, 64 << 20, 256 << 20} {
		b := buf[:z]
		var h, d, sp []time.Duration
		for i := 0; i < runs; i++ {
			t0 := time.Now()
			crc32c.Checksum(b)
			h = append(h, time.Since(t0))
			t0 = time.Now()
			if _, err := c.Checksum(ctx, b); err != nil {
				return err
			}
			d = append(d, time.Since(t0))
			t0 = time.Now()
			if _, _, err := c.ChecksumSplit(ctx, b, rails); err != nil {
				return err
			}
			sp = append(sp, time.Since(t0))
		}
		gbs := func(t time.Duration) float64 { return float64(z) / t.Seconds() / 1e9 }
		name := sizeName(z)
		rep.add(s, name+" checksum, learned model: predicted", gbs(rail.Split(rails, int64(z), 4096).Predicted), "GB/s")
		rep.add(s, name+" checksum, learned model: achieved (split)", gbs(median(sp)), "GB/s")
		rep.add(s, name+" checksum, learned model: host alone", gbs(median(h)), "GB/s")
		rep.add(s, name+" checksum, learned model: dpu alone", gbs(median(d)), "GB/s")
	}
	for _, rl := range rails {
		rep.add(s, fmt.Sprintf("%s rail (%s) crc32c, calibrated then learned from %d splits", rl.Name, rl.Kind, learnRuns), rl.Rate/1e9, "GB/s")
		if rl.Alpha > 0 {
			rep.add(s, fmt.Sprintf("calibrated %s rail fixed cost α", rl.Name), float64(rl.Alpha.Nanoseconds())/1e3, "µs")
		}
	}
	for _, sh := range plan.Shares {
		rep.add(s, fmt.Sprintf("planned share of %s", sh.Rail), 100*float64(sh.Bytes)/size, "%")
	}
	pred, got := plan.Predicted, median(split)
	bestOne := min(median(hostOnly), median(dpuOnly))
	rep.add(s, "256 MiB checksum: planner's predicted time", ms(pred), "ms")
	rep.add(s, "256 MiB checksum: achieved (median of split runs)", ms(got), "ms")
	rep.add(s, "256 MiB checksum: host rail alone (median)", ms(median(hostOnly)), "ms")
	rep.add(s, "256 MiB checksum: dpu rail alone, bf2 profile (median)", ms(median(dpuOnly)), "ms")
	rep.add(s, "256 MiB checksum: host CPU-seconds per split checksum", hostCPU.Seconds()/float64(runs), "s")
	var ratios []float64
	for _, d := range oneShot {
		ratios = append(ratios, d.Seconds()/bestOne.Seconds())
	}
	rep.add(s, "256 MiB one-shot (calibrate, then ChecksumAuto): predicted (median of 3)", ms(median(oneShotPred)), "ms")
	rep.add(s, "256 MiB one-shot: achieved (median of 3)", ms(median(oneShot)), "ms")
	rep.add(s, "256 MiB one-shot: runs that split (the others ran one rail)", float64(splits), "of 3")
	rep.atMostN(s, "one-shot / best single rail (256 MiB, bf2)", ratios, 1.05, "×")
	// Each split run against the prediction and against the best single
	// rail's median.
	var off, vsBest []float64
	for _, d := range split {
		off = append(off, abs(d.Seconds()/pred.Seconds()-1))
		vsBest = append(vsBest, d.Seconds()/bestOne.Seconds())
	}
	rep.atMostN(s, "achieved / predicted − 1 (256 MiB split)", off, 0.10, "")
	if len(plan.Shares) > 1 {
		rep.atMostN(s, "split / best single rail (256 MiB, the model says splitting pays)", vsBest, 1.0, "×")
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
