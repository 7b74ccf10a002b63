package main

import (
	"context"
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

// The capi scenario (issue: the host stub for C, C++ and Python): PING
// round trips from C (libhec) and from Python (the hec package over
// libhec) next to Go's, and a 64 MiB CHECKSUM through a window buffer from
// each, all against one agent, each client a process of its own, taking
// turns.

func init() {
	children["capi-go"] = childCapiGo
}

// capiResult is one client's line: PING p50 and p99, CHECKSUM GB/s, and
// the CRC (the three clients fill the same bytes: their CRCs must agree).
type capiResult struct {
	p50, p99, gbs float64
	crc           string
}

func parseCapi(who, line string) (capiResult, error) {
	var r capiResult
	_, err := fmt.Sscanf(strings.TrimSpace(line), "ping_p50_ns %f ping_p99_ns %f checksum_gbs %f crc %s", &r.p50, &r.p99, &r.gbs, &r.crc)
	if err != nil {
		return r, fmt.Errorf("the %s client said %q: %w", who, line, err)
	}
	return r, nil
}

func benchCapi(ctx context.Context, rep *Report, quick bool) error {
	const s = "capi"
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return fmt.Errorf("gcc not installed (make bench installs it as root): %w", err)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return fmt.Errorf("python3 not installed: %w", err)
	}
	n, reps := 200_000, 5
	if quick {
		n, reps = 20_000, 1
	}
	dir, err := os.MkdirTemp("", "hec-bench-capi")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root := testutil.ModuleRoot()
	progress(s, "building libhec.so and the C client")
	so, err := testutil.BuildLibhec(dir, "c-shared")
	if err != nil {
		return err
	}
	cbin := filepath.Join(dir, "bench")
	if out, err := exec.Command(gcc, "-O2", "-I"+filepath.Join(root, "host", "libhec"), "-o", cbin,
		filepath.Join(root, "test", "bench", "capi", "bench.c"), "-L"+dir, "-lhec", "-Wl,-rpath,"+dir).CombinedOutput(); err != nil {
		return fmt.Errorf("building the C client: %v\n%s", err, out)
	}

	shm := shmPath("capi")
	stop, err := startAgent(ctx, shm, filepath.Join(dir, "state"))
	if err != nil {
		return err
	}
	defer stop()

	self, _ := os.Executable()
	clients := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"Go", func() *exec.Cmd { return exec.Command(self, "child", "capi-go", shm, fmt.Sprint(n)) }},
		{"C", func() *exec.Cmd { return exec.Command(cbin, shm, fmt.Sprint(n)) }},
		{"Python", func() *exec.Cmd {
			c := exec.Command(py, filepath.Join(root, "test", "bench", "capi", "bench.py"), shm, fmt.Sprint(n))
			c.Env = append(os.Environ(), "HEC_LIB="+so)
			return c
		}},
	}
	res := map[string][]capiResult{}
	for r := range reps {
		for _, cl := range clients {
			progress(s, "round %d of %d: the %s client: %d PINGs, CHECKSUMs of 64 MiB", r+1, reps, cl.name, n)
			cmd := cl.cmd()
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("the %s client: %w", cl.name, err)
			}
			v, err := parseCapi(cl.name, string(out))
			if err != nil {
				return err
			}
			res[cl.name] = append(res[cl.name], v)
		}
	}
	pick := func(name string, f func(capiResult) float64) []float64 {
		var v []float64
		for _, r := range res[name] {
			v = append(v, f(r))
		}
		return v
	}
	p50 := func(r capiResult) float64 { return r.p50 }
	p99 := func(r capiResult) float64 { return r.p99 }
	gbs := func(r capiResult) float64 { return r.gbs }
	for _, cl := range clients {
		rep.addN(s, "PING from "+cl.name+" p50", pick(cl.name, p50), "ns")
		rep.addN(s, "PING from "+cl.name+" p99", pick(cl.name, p99), "ns")
		rep.addN(s, "CHECKSUM 64 MiB window buffer from "+cl.name, pick(cl.name, gbs), "GB/s")
	}
	crcs := map[string]bool{}
	for _, rs := range res {
		for _, r := range rs {
			crcs[r.crc] = true
		}
	}
	same := 0.0
	if len(crcs) == 1 {
		same = 1
	}
	rep.atLeast(s, "the three clients' CRCs of the same 64 MiB agree (1 = yes)", same, 1, "")
	rep.atMostN(s, "PING p50 from C / from Go", ratio(pick("C", p50), pick("Go", p50)), 1.3, "×")
	rep.atLeastN(s, "CHECKSUM 64 MiB from Python / from Go (zero copy)", ratio(pick("Python", gbs), pick("Go", gbs)), 0.9, "×")
	return nil
}

// childCapiGo is the Go client of the capi scenario: what bench.c does,
// through package host.
func childCapiGo(args []string) error {
	ctx := context.Background()
	n := atoi(args[1])
	c, err := host.Dial(ctx, "shm://"+args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := pingTimes(ctx, c, n)
	if err != nil {
		return err
	}
	slices.Sort(d)
	const size = 64 << 20
	buf, err := c.Alloc(size)
	if err != nil {
		return err
	}
	for i := range buf {
		j := i & 0xffff
		buf[i] = byte(j*31 + j>>8) // as bench.c and bench.py
	}
	var ts []time.Duration
	var crc uint32
	for range 15 {
		t0 := time.Now()
		if crc, err = c.Checksum(ctx, buf); err != nil {
			return err
		}
		ts = append(ts, time.Since(t0))
	}
	slices.Sort(ts)
	fmt.Printf("ping_p50_ns %d ping_p99_ns %d checksum_gbs %.3f crc %08x\n", d[n/2].Nanoseconds(), d[n*99/100].Nanoseconds(),
		size/ts[7].Seconds()/1e9, crc)
	return c.Free(buf)
}
