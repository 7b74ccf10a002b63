package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
)

// The agent scenarios (issue: the agent and the host library): PING through
// the dispatcher against the floor and a Unix socket, CHECKSUM of 64 MiB
// through the agent against crc32c in-process, and the CPU an idle agent and
// an idle client use after a burst.

func init() {
	children["agent-client"] = childAgentClient
}

// agentResult is what the client child reports.
type agentResult struct {
	Ping           Latency
	ChecksumGBs    float64 // through the agent, median of runs
	InProcessGBs   float64 // crc32c in the child, same buffer, median of runs
	ChecksumMatch  bool
	IdleCPUPercent float64 // the child's own CPU while idle
	IdleSeconds    float64
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchAgent(ctx context.Context, rep *Report, quick bool) error {
	n, idle := 200_000, 5*time.Second
	if quick {
		n, idle = 20_000, 2*time.Second
	}
	// Floor and Unix socket from this run (measured again if the handoff
	// scenario did not run).
	floor, unixRTT := rep.value("handoff", "shared-memory ping-pong (floor) p50"), rep.value("handoff", "unix socket round trip, 64 B p50")
	if floor == 0 || unixRTT == 0 {
		f, err := runFloor(n)
		if err != nil {
			return err
		}
		u, err := runUnix(n / 4)
		if err != nil {
			return err
		}
		floor, unixRTT = f.P50, u.P50
	}

	dir, err := os.MkdirTemp("", "hec-bench-agent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	shm := shmPath("agent")
	stop, err := startAgent(ctx, shm, dir)
	if err != nil {
		return err
	}
	defer stop()

	// Repetitions: a client process each, against the same agent.
	var pings []Latency
	var sum, crc, agentPct, clientPct []float64
	reps := 3
	if quick {
		reps = 1
	}
	for r := range reps {
		progress("agent", "client %d of %d: %d PINGs, CHECKSUMs of 64 MiB, %v idle", r+1, reps, n, idle)
		res, agentIdle, err := runAgentClient(shm, n, idle)
		if err != nil {
			return err
		}
		if !res.ChecksumMatch {
			return fmt.Errorf("the agent's checksum differs from the in-process one")
		}
		pings = append(pings, res.Ping)
		sum, crc = append(sum, res.ChecksumGBs), append(crc, res.InProcessGBs)
		agentPct = append(agentPct, 100*agentIdle.Seconds()/res.IdleSeconds)
		clientPct = append(clientPct, res.IdleCPUPercent)
	}
	const s = "agent"
	var p50 []float64
	for _, pc := range percentiles {
		var v []float64
		for _, l := range pings {
			v = append(v, pc.of(l))
		}
		rep.addN(s, "PING through the dispatcher (shm) "+pc.name, v, "ns")
		if pc.name == "p50" {
			p50 = v
		}
	}
	rep.addN(s, "CHECKSUM 64 MiB through the agent", sum, "GB/s")
	rep.addN(s, "crc32c 64 MiB in-process (one core)", crc, "GB/s")
	rep.addN(s, "idle agent CPU, one idle client attached, after a burst", agentPct, "% of a core")
	rep.addN(s, "idle client library CPU", clientPct, "% of a core")
	rep.atMostN(s, "PING p50 / floor p50", scale(p50, 1/floor), 5, "×")
	rep.atLeastN(s, "unix p50 / PING p50", inverse(p50, unixRTT), 10, "×")
	rep.atLeastN(s, "CHECKSUM through agent / in-process", ratio(sum, crc), 0.9, "×")
	// CPU-seconds per second of wall time: a fraction, the same on any
	// machine (an idle program's wakeups cost little anywhere).
	rep.atMostN(s, "idle agent CPU (share of a core)", agentPct, 2, "%")
	rep.atMostN(s, "idle client CPU (share of a core)", clientPct, 2, "%")
	return nil
}

// startAgent runs an agent in this process on region shm, state in dir,
// with two queue pairs in 160 MiB (windows large enough for a 64 MiB
// buffer) and nothing else listening, once it has calibrated its rail;
// stop stops it and removes the region.
func startAgent(ctx context.Context, shm, dir string) (stop func(), err error) {
	a, err := dpu.New(dpu.Config{Agent: dpu.AgentConfig{Shm: shm, RegionSize: 160 << 20, QueuePairs: 2, TCP: dpu.Off, Mgmt: dpu.Off,
		StateDir: dir}, RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off}}, nil)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	<-a.Ready()
	// The agent calibrates its rail in the background once ready: let it
	// finish, or it shares the cores with what is measured.
	for deadline := time.Now().Add(10 * time.Second); len(a.Rails()) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return func() { cancel(); <-done; os.Remove(shm) }, nil
}

// runAgentClient runs one client child against the agent at shm and
// returns its report and the agent's CPU while the client idled.
func runAgentClient(shm string, n int, idle time.Duration) (agentResult, time.Duration, error) {
	var res agentResult
	self, _ := os.Executable()
	cmd := exec.Command(self, "child", "agent-client", shm, fmt.Sprint(n), idle.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return res, 0, err
	}
	if err := cmd.Start(); err != nil {
		return res, 0, err
	}
	sc := bufio.NewScanner(out)
	var agentIdle time.Duration
	var t0 time.Time
	for sc.Scan() {
		switch line := sc.Text(); line {
		case "idle-start":
			agentIdle, t0 = cpuTime(), time.Now()
		case "idle-end":
			agentIdle = cpuTime() - agentIdle
		default:
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				return res, 0, fmt.Errorf("agent-client said %q: %w", line, err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return res, 0, fmt.Errorf("agent-client: %w", err)
	}
	if t0.IsZero() {
		return res, 0, fmt.Errorf("agent-client never went idle")
	}
	return res, agentIdle, nil
}

func (r *Report) value(scenario, metric string) float64 {
	for _, row := range r.Rows {
		if row.Scenario == scenario && row.Metric == metric {
			return row.Value
		}
	}
	return 0
}

func childAgentClient(args []string) error {
	ctx := context.Background()
	n := atoi(args[1])
	idle, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	c, err := host.Dial(ctx, "shm://"+args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	var res agentResult

	d, err := pingTimes(ctx, c, n)
	if err != nil {
		return err
	}
	res.Ping = latencies(d)

	const size = 64 << 20
	buf, err := c.Alloc(size)
	if err != nil {
		return fmt.Errorf("alloc 64 MiB in the window: %w", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < size; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	var agentT, localT []float64
	var agentCRC, localCRC uint32
	for r := 0; r < 7; r++ {
		t0 := time.Now()
		agentCRC, err = c.Checksum(ctx, buf)
		if err != nil {
			return err
		}
		agentT = append(agentT, time.Since(t0).Seconds())
		t0 = time.Now()
		localCRC = crc32.Checksum(buf, table)
		localT = append(localT, time.Since(t0).Seconds())
	}
	slices.Sort(agentT)
	slices.Sort(localT)
	res.ChecksumGBs = size / agentT[3] / 1e9
	res.InProcessGBs = size / localT[3] / 1e9
	res.ChecksumMatch = agentCRC == localCRC

	// Idle with the client attached: let the waiters reach their long
	// sleeps, then measure.
	time.Sleep(time.Second)
	fmt.Println("idle-start")
	c0, t0 := cpuTime(), time.Now()
	time.Sleep(idle)
	res.IdleSeconds = time.Since(t0).Seconds()
	res.IdleCPUPercent = 100 * (cpuTime() - c0).Seconds() / res.IdleSeconds
	fmt.Println("idle-end")
	return emit(res)
}
