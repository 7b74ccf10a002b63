package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/test/testutil"
)

// The kv scenario (issue: the KV service): redis-benchmark against hecd's
// RESP front end and against redis-server, started here in the same run,
// server and benchmark pinned to different cores, on a keyspace loaded
// first. Each server's CPU-seconds per 100k ops come from /proc.

type kvServer struct {
	name string
	cmd  *exec.Cmd
	port int
}

func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

func waitPort(port int) error {
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %d", port)
}

func startKV(name string, port int, args ...string) (*kvServer, error) {
	cmd := exec.Command("taskset", append([]string{"-c", "0"}, args...)...)
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := waitPort(port); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &kvServer{name: name, cmd: cmd, port: port}, nil
}

func (s *kvServer) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// waitCalibrated waits until the agent whose management API is at mgmt is
// ready and reports its rails (its own background calibration done) — or
// only ready, for an agent without a handoff transport, which has no rails
// to calibrate.
func waitCalibrated(ctx context.Context, mgmt string) error {
	m := host.NewMgmt(mgmt)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, err := m.Status(ctx); err == nil && st.Ready && (len(st.Rails) > 0 || !st.ServesHandoff()) {
			return nil
		}
	}
	return fmt.Errorf("hecd at %s did not finish calibrating in 20s", mgmt)
}

// redisBench runs redis-benchmark pinned to core 1 and returns requests per
// second by test name, and the server's CPU seconds spent meanwhile.
func redisBench(s *kvServer, tests string, n, pipeline int) (map[string]float64, float64, error) {
	cpu0 := procCPU(s.cmd.Process.Pid)
	out, err := exec.Command("taskset", "-c", "1", "redis-benchmark", "-p", strconv.Itoa(s.port), "-t", tests,
		"-r", "100000", "-d", "100", "-c", "50", "-n", strconv.Itoa(n), "-P", strconv.Itoa(pipeline), "--csv").Output()
	cpu := procCPU(s.cmd.Process.Pid) - cpu0
	if err != nil {
		return nil, 0, fmt.Errorf("redis-benchmark against %s: %w", s.name, err)
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return nil, 0, err
	}
	rps := map[string]float64{}
	for _, r := range recs[1:] {
		if len(r) > 1 {
			v, _ := strconv.ParseFloat(r[1], 64)
			rps[r[0]] = v
		}
	}
	return rps, cpu, nil
}

// scratchHecd makes a scratch directory for a scenario (the caller
// removes it) and builds this tree's hecd into it, so the bench measures
// the agent it was built with.
func scratchHecd(tag string) (dir, hecd string, err error) {
	if dir, err = os.MkdirTemp("", "hec-bench-"+tag); err != nil {
		return "", "", err
	}
	if hecd, err = testutil.Build("./dpu/cmd/hecd"); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, hecd, nil
}

// kvReps is how often each redis-benchmark comparison runs: checks use the
// median of the ratios. Five short pairs rather than three long ones: on a
// machine whose speed changes from one second to the next (seen: the pairs
// of one GET run between 0.69 and 1.39), pairs closer in time and a
// median that outlasts two bad ones hold better, in the same time.
const kvReps = 5

func benchKV(ctx context.Context, rep *Report, quick bool) error {
	for _, bin := range []string{"redis-server", "redis-benchmark", "taskset"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (make bench installs redis-server and redis-tools as root): %w", bin, err)
		}
	}
	dir, hecd, err := scratchHecd("kv")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n, reps := 100_000, kvReps
	if quick {
		n, reps = 30_000, 3
	}
	const s = "kv"
	type setup struct {
		label, peerLabel string
		hecdArgs         []string
		redisArgs        []string
	}
	setups := []setup{
		{"async", "no persistence", []string{"--durability", "async"}, []string{"--save", "", "--appendonly", "no"}},
		{"sync", "appendfsync always", []string{"--durability", "sync"}, []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}},
	}
	for i, st := range setups {
		hport, rport, mport := 26400+i*3, 26401+i*3, 26402+i*3
		h, err := startKV("hecd", hport, append([]string{hecd, "--shm", "off", "--tcp", "off", "--udp", "off",
			"--mgmt", fmt.Sprintf("127.0.0.1:%d", mport), "--resp", fmt.Sprintf("127.0.0.1:%d", hport),
			"--state-dir", filepath.Join(dir, "hecd-"+st.label), "--log-level", "error"}, st.hecdArgs...)...)
		if err != nil {
			return err
		}
		// An agent with a handoff transport calibrates its rail once, in
		// the background, soon after it starts: let it finish, or it
		// shares the server's core with what is measured. (This one has
		// none: it is only ready.)
		if err := waitCalibrated(ctx, fmt.Sprintf("127.0.0.1:%d", mport)); err != nil {
			h.stop()
			return err
		}
		rdir := filepath.Join(dir, "redis-"+st.label)
		os.MkdirAll(rdir, 0o755)
		r, err := startKV("redis", rport, append([]string{"redis-server", "--port", strconv.Itoa(rport), "--bind", "127.0.0.1",
			"--dir", rdir, "--daemonize", "no", "--loglevel", "warning"}, st.redisArgs...)...)
		if err != nil {
			h.stop()
			return err
		}
		servers := []*kvServer{h, r}
		// Load the keyspace first: SET over the whole key range.
		for _, sv := range servers {
			if _, _, err := redisBench(sv, "set", 100_000, 16); err != nil {
				h.stop()
				r.stop()
				return err
			}
		}
		for _, p := range []int{1, 16} {
			tests := "set"
			if st.label == "async" {
				tests = "set,get"
			}
			count := n * max(1, p/4)
			if st.label == "sync" && p == 1 {
				count = n / 4 // every write waits for an fsync: fewer of them
			}
			// kvReps repetitions, the two servers alternating which goes
			// first: each ratio is of two runs side by side in time.
			rps := map[string]map[string][]float64{} // server → test → req/s
			cpus := map[string][]float64{}
			ratios := map[string][]float64{} // test → hecd/redis
			for k := range reps {
				order := servers
				if k%2 == 1 {
					order = []*kvServer{servers[1], servers[0]}
				}
				got := map[string]map[string]float64{}
				for _, sv := range order {
					progress(s, "%s %s -P %d, %s (%d/%d)", st.label, tests, p, sv.name, k+1, reps)
					res, cpu, err := redisBench(sv, tests, count, p)
					if err != nil {
						h.stop()
						r.stop()
						return err
					}
					got[sv.name] = res
					ops := float64(count * len(strings.Split(tests, ",")))
					cpus[sv.name] = append(cpus[sv.name], cpu/ops*1e5)
					if rps[sv.name] == nil {
						rps[sv.name] = map[string][]float64{}
					}
					for t, v := range res {
						rps[sv.name][t] = append(rps[sv.name][t], v)
					}
				}
				for t := range got["hecd"] {
					ratios[t] = append(ratios[t], got["hecd"][t]/got["redis"][t])
				}
			}
			for _, sv := range servers {
				rep.addN(s, fmt.Sprintf("%s CPU-seconds per 100k ops (%s, -P %d)", sv.name, st.label, p), cpus[sv.name], "s")
				for t, v := range rps[sv.name] {
					peer := st.label
					if sv.name == "redis" {
						peer = st.peerLabel
					}
					rep.addN(s, fmt.Sprintf("%s %s (%s) -P %d", sv.name, t, peer, p), v, "req/s")
				}
			}
			for t, v := range ratios {
				switch {
				case t == "GET":
					rep.atLeastN(s, fmt.Sprintf("GET hecd/redis -P %d", p), v, 1.0, "×")
				case t == "SET" && st.label == "async":
					rep.atLeastN(s, fmt.Sprintf("SET async hecd/redis (no persistence) -P %d", p), v, 0.8, "×")
				case t == "SET":
					rep.atLeastN(s, fmt.Sprintf("SET sync hecd/redis (appendfsync always) -P %d", p), v, 1.0, "×")
				}
			}
		}
		if st.label == "sync" {
			// Redis's "PIPELINING stresser": SET and GET interleaved in
			// one pipeline, which redis-benchmark cannot send.
			pairs := 100_000
			if quick {
				pairs = 20_000
			}
			took := map[string][]float64{}
			for k := range reps {
				order := servers
				if k%2 == 1 {
					order = []*kvServer{servers[1], servers[0]}
				}
				for _, sv := range order {
					progress(s, "sync SET/GET interleave, %s (%d/%d)", sv.name, k+1, reps)
					d, err := interleave(ctx, sv.port, pairs)
					if err != nil {
						h.stop()
						r.stop()
						return err
					}
					took[sv.name] = append(took[sv.name], d.Seconds())
				}
			}
			for _, sv := range servers {
				rep.addN(s, fmt.Sprintf("%s %d SET/GET pairs in one pipeline (%s)", sv.name, pairs, st.peerLabel), took[sv.name], "s")
			}
			rep.atMostN(s, "pipelined SET/GET interleave, sync: hecd time/redis (appendfsync always)",
				ratio(took["hecd"], took["redis"]), 1.5, "×")
		}
		h.stop()
		r.stop()
	}
	return nil
}

// interleave sends pairs of SET k v, GET k over one connection in one
// pipeline (as Redis's test suite's "PIPELINING stresser" does), reads
// every reply, checks each GET's, and returns the time from the first
// byte sent to the last reply read.
func interleave(ctx context.Context, port, pairs int) (time.Duration, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	var req []byte
	for i := range pairs {
		k, v := "key:"+strconv.Itoa(i%1000), "val:"+strconv.Itoa(i)
		req = fmt.Appendf(req, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n",
			len(k), k, len(v), v, len(k), k)
	}
	start := time.Now()
	sent := make(chan error, 1)
	go func() { _, err := c.Write(req); sent <- err }()
	br := bufio.NewReaderSize(c, 1<<16)
	for i := range pairs {
		if l, err := br.ReadString('\n'); err != nil || l != "+OK\r\n" {
			return 0, fmt.Errorf("SET %d: %q %v", i, l, err)
		}
		want := "val:" + strconv.Itoa(i)
		if l, err := br.ReadString('\n'); err != nil || l != fmt.Sprintf("$%d\r\n", len(want)) {
			return 0, fmt.Errorf("GET %d: %q %v", i, l, err)
		}
		if l, err := br.ReadString('\n'); err != nil || l != want+"\r\n" {
			return 0, fmt.Errorf("GET %d: %q, want %q (%v)", i, l, want, err)
		}
	}
	took := time.Since(start)
	return took, <-sent
}

func rssBytes(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// benchKVClients: 1,000 RESP clients at once, each pipelining SETs and
// GETs of 1 KiB values, against hecd and against redis-server (no
// persistence) in the same run, each server fresh for each repetition:
// resident memory idle and at the peak, and the clients' ops per second.
func benchKVClients(ctx context.Context, rep *Report, quick bool) error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server not installed (make bench installs it as root): %w", err)
	}
	dir, hecd, err := scratchHecd("clients")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	const s = "kv-clients"
	rounds, reps := 20, kvReps
	if quick {
		rounds, reps = 5, 1
	}
	start := map[string]func(k int) (*kvServer, error){
		"hecd": func(k int) (*kvServer, error) {
			const port = 26410
			return startKV("hecd", port, hecd, "--shm", "off", "--tcp", "off", "--mgmt", "off", "--udp", "off",
				"--resp", fmt.Sprintf("127.0.0.1:%d", port), "--state-dir", filepath.Join(dir, fmt.Sprintf("state%d", k)),
				"--durability", "async", "--log-level", "error")
		},
		"redis": func(k int) (*kvServer, error) {
			const port = 26411
			rdir := filepath.Join(dir, fmt.Sprintf("redis%d", k))
			os.MkdirAll(rdir, 0o755)
			return startKV("redis", port, "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", rdir,
				"--daemonize", "no", "--loglevel", "warning", "--save", "", "--appendonly", "no", "--maxclients", "2000")
		},
	}
	idle, peak, growth, ops := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for k := range reps {
		order := []string{"hecd", "redis"}
		if k%2 == 1 {
			order = []string{"redis", "hecd"}
		}
		for _, name := range order {
			progress(s, "%s: 1000 clients, %d pipelined rounds each (%d/%d)", name, rounds, k+1, reps)
			sv, err := start[name](k)
			if err != nil {
				return err
			}
			f, err := thousandClients(sv, rounds)
			sv.stop()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			idle[name] = append(idle[name], f.idle/(1<<20))
			peak[name] = append(peak[name], f.peak/(1<<20))
			growth[name] = append(growth[name], (f.peak-f.idle)/(1<<20))
			ops[name] = append(ops[name], f.ops)
		}
	}
	for _, name := range []string{"hecd", "redis"} {
		rep.addN(s, name+" resident memory, idle", idle[name], "MiB")
		rep.addN(s, name+" resident memory, peak with 1000 RESP clients pipelining 1 KiB SET/GET", peak[name], "MiB")
		rep.addN(s, name+" ops by 1000 clients", ops[name], "ops/s")
	}
	// What the clients cost in memory, beyond each server's idle size
	// (hecd's idle size is Badger's tables and caches, reported above).
	rep.atMostN(s, "resident memory the 1000 clients add: hecd / redis", ratio(growth["hecd"], growth["redis"]), 2, "×")
	rep.atLeastN(s, "ops by 1000 clients: hecd / redis", ratio(ops["hecd"], ops["redis"]), 0.8, "×")
	return nil
}

// clientsFigures are one server's figures under the 1000 clients.
type clientsFigures struct{ idle, peak, ops float64 }

// thousandClients connects 1000 clients to sv, has each pipeline rounds of
// 8 SETs and 8 GETs of 1 KiB, and samples the server's resident memory.
func thousandClients(sv *kvServer, rounds int) (clientsFigures, error) {
	var f clientsFigures
	pid := sv.cmd.Process.Pid
	f.idle = rssBytes(pid)
	const clients = 1000
	val := strings.Repeat("v", 1024)
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", sv.port))
		if err != nil {
			return f, fmt.Errorf("client %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	f.peak = rssBytes(pid)
	errs := make(chan error, clients)
	start := time.Now()
	for i, c := range conns {
		go func(i int, c net.Conn) {
			var req strings.Builder
			for k := 0; k < 8; k++ {
				key := fmt.Sprintf("c%d:%d", i, k)
				fmt.Fprintf(&req, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(val), val)
				fmt.Fprintf(&req, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
			}
			buf := make([]byte, 64<<10)
			for r := 0; r < rounds; r++ {
				if _, err := c.Write([]byte(req.String())); err != nil {
					errs <- err
					return
				}
				// 8 "+OK\r\n" and 8 bulk replies of 1 KiB.
				want := 8*5 + 8*(len(val)+2+7)
				got := 0
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				for got < want {
					n, err := c.Read(buf)
					if err != nil {
						errs <- err
						return
					}
					if got == 0 && n > 0 && buf[0] == '-' {
						errs <- fmt.Errorf("client %d: %q", i, bytes.TrimSpace(buf[:min(n, 80)]))
						return
					}
					got += n
				}
			}
			errs <- nil
		}(i, c)
	}
	stopSample := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSample:
				return
			case <-time.After(50 * time.Millisecond):
				f.peak = max(f.peak, rssBytes(pid))
			}
		}
	}()
	var first error
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("a client failed: %w", err)
		}
	}
	elapsed := time.Since(start)
	close(stopSample)
	<-sampled
	f.ops = float64(clients*rounds*16) / elapsed.Seconds()
	return f, first
}
