package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/crc32c"
)

const usage = `usage: hecctl COMMAND [flags]

commands:
  status      agent version, generation, services, queue pairs and op counts
  ping        round trips through the agent (--n N); prints p50, p90, p99
  checksum    CRC-32C of a file computed by the agent (--verify compares in-process)
  rails       this host's CPUs, NICs, DPUs and GPUs, the agent's platform and DPU profile,
              and each rail's calibrated rates (--recalibrate: measure the host again)
  metrics     the agent's hec_* Prometheus series
  kv get KEY | put [--ttl D] KEY VALUE | del KEY | scan [--limit N] [PREFIX]
              the agent's key-value store over the handoff
  inspect     the agent's XDP counters: per-class rates, drops by reason, top talkers
              (--interval D --count N); --pcap FILE [--seconds S --every N --snap B]
              writes sampled packet heads for tshark -r FILE
  acl add PREFIX [--deny] | del PREFIX | list
              the XDP allow-list of source prefixes on the service ports
  cluster up|down|status|ping|exec
              test clusters of network namespaces, an agent in each (hecctl cluster for more)
  qemu up|down|console|status [--name N]
              boot the arm64 image in QEMU (make image first), stop it, show its console or state

flags (every command):
  --agent T   shm:///dev/shm/NAME, tcp://HOST:PORT, a path or HOST:PORT (default ` + host.DefaultShm + `)
  --mgmt A    management HOST:PORT (default ` + host.DefaultMgmt + `)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "hecctl:", err)
		os.Exit(1)
	}
}

type common struct {
	agent string
	mgmt  string
}

func flags(name string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("hecctl "+name, flag.ContinueOnError)
	fs.StringVar(&c.agent, "agent", host.DefaultShm, "agent target")
	fs.StringVar(&c.mgmt, "mgmt", host.DefaultMgmt, "management address")
	return fs
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	var c common
	switch cmd, rest := args[0], args[1:]; cmd {
	case "status":
		fs := flags(cmd, &c)
		if err := fs.Parse(rest); err != nil {
			return err
		}
		return status(ctx, c, out)
	case "ping":
		fs := flags(cmd, &c)
		n := fs.Int("n", 1000, "round trips")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		return ping(ctx, c, *n, out)
	case "checksum":
		fs := flags(cmd, &c)
		verify := fs.Bool("verify", false, "also compute the CRC in-process and compare")
		rails := fs.String("rails", "dpu", "dpu: the agent alone; auto: split between this host's CPU and the agent by the planner")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("checksum: want one FILE")
		}
		switch *rails {
		case "dpu":
			return checksum(ctx, c, fs.Arg(0), *verify, out)
		case "auto":
			return checksumRails(ctx, c, fs.Arg(0), out)
		}
		return fmt.Errorf("checksum: --rails %q: want dpu or auto", *rails)
	case "rails":
		fs := flags(cmd, &c)
		recal := fs.Bool("recalibrate", false, "measure the host rail now, not from the cache")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		return railsCmd(ctx, c, *recal, out)
	case "qemu":
		return qemuCmd(ctx, rest, out)
	case "cluster":
		return clusterCmd(ctx, rest, out)
	case "kv":
		return kvCmd(ctx, rest, out)
	case "inspect":
		return inspectCmd(ctx, rest, out)
	case "acl":
		return aclCmd(ctx, rest, out)
	case "metrics":
		fs := flags(cmd, &c)
		if err := fs.Parse(rest); err != nil {
			return err
		}
		return metrics(ctx, c, out)
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func status(ctx context.Context, c common, out io.Writer) error {
	st, err := host.NewMgmt(c.mgmt).Status(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "agent    hecd %s, pid %d, up %s, generation %d\n", st.Version, st.PID,
		(time.Duration(st.UptimeSec) * time.Second).String(), st.Generation)
	if st.Region != "" {
		fmt.Fprintf(out, "region   %s, %d MiB, window %d KiB per queue pair\n", st.Region, st.RegionSize>>20, st.WindowSize>>10)
	}
	fmt.Fprintf(out, "state    %s\n", st.StateDir)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSERVICE\tADDRESS\tSERVED\tNOTE")
	for _, s := range st.Services {
		served := "yes"
		if !s.Served {
			served = "NO"
		}
		if s.Stopped != "" {
			served = "STOPPED: " + s.Stopped
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Addr, served, s.Note)
	}
	active := 0
	fmt.Fprintln(tw, "\nQUEUE PAIR\tSTATE\tHOLDER PID\tIN FLIGHT\tFAULTS/FENCES\tREASON")
	for _, q := range st.QueuePairs {
		if q.State == "free" && q.Faults == 0 && q.Fences == 0 {
			continue
		}
		active++
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d/%d\t%s\n", q.Index, q.State, q.PID, q.InFlight, q.Faults, q.Fences, q.Reason)
	}
	fmt.Fprintf(tw, "(%d of %d queue pairs shown; the rest are free and untouched)\n", active, len(st.QueuePairs))
	fmt.Fprintln(tw, "\nOP\tCOUNT\tERRORS")
	for _, o := range st.Ops {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", o.Op, o.Count, o.Errors)
	}
	return tw.Flush()
}

func dial(ctx context.Context, c common) (*host.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return host.Dial(dctx, host.ParseTarget(c.agent))
}

func ping(ctx context.Context, c common, n int, out io.Writer) error {
	if n < 1 {
		return fmt.Errorf("ping: --n %d", n)
	}
	cl, err := dial(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	// A few warm-up round trips, then n measured.
	for i := 0; i < min(n, 100); i++ {
		if err := cl.Ping(ctx); err != nil {
			return err
		}
	}
	d := make([]time.Duration, n)
	for i := range d {
		t0 := time.Now()
		if err := cl.Ping(ctx); err != nil {
			return err
		}
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	p := func(q float64) time.Duration { return d[int(q*float64(n-1))] }
	fmt.Fprintf(out, "ping %s: %d round trips: p50 %v  p90 %v  p99 %v\n", cl, n, p(0.5), p(0.9), p(0.99))
	return nil
}

func checksum(ctx context.Context, c common, path string, verify bool, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cl, err := dial(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Read the file straight into buffers the agent reads in place.
	const chunk = 1 << 20
	buf, err := cl.Alloc(chunk)
	if err != nil {
		return err
	}
	defer cl.Free(buf)
	var crc, local uint32
	var total int64
	var agentTime time.Duration
	for {
		n, rerr := io.ReadFull(f, buf)
		if n > 0 {
			t0 := time.Now()
			part, err := cl.Checksum(ctx, buf[:n])
			agentTime += time.Since(t0)
			if err != nil {
				return err
			}
			crc = crc32c.Combine(crc, part, int64(n))
			if verify {
				local = crc32c.Update(local, buf[:n])
			}
			total += int64(n)
		}
		if rerr == io.EOF || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	fmt.Fprintf(out, "%08x  %s  (%d bytes, crc32c by the agent over %s, %.2f GB/s in the agent's hands)\n",
		crc, path, total, cl, float64(total)/agentTime.Seconds()/1e9)
	if verify {
		if local != crc {
			return fmt.Errorf("MISMATCH: in-process crc32c %08x", local)
		}
		fmt.Fprintf(out, "%08x  in-process: match\n", local)
	}
	return nil
}

func metrics(ctx context.Context, c common, out io.Writer) error {
	text, err := host.NewMgmt(c.mgmt).Metrics(ctx)
	if err != nil {
		return err
	}
	s := bufio.NewScanner(strings.NewReader(text))
	for s.Scan() {
		if l := s.Text(); strings.HasPrefix(l, "hec_") && !strings.Contains(l, "_bucket{") {
			fmt.Fprintln(out, l)
		}
	}
	return s.Err()
}

func qemuCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("qemu: want up, down, console or status")
	}
	fs := flag.NewFlagSet("hecctl qemu "+args[0], flag.ContinueOnError)
	name := fs.String("name", "hec-vm", "VM name (state in .cache/qemu/NAME)")
	bundle := fs.String("bundle", "", "image bundle (default .cache/images/qemu)")
	follow := fs.Bool("follow", false, "console: keep printing as it grows")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	dir := qemu.StateDirFor(*name)
	switch args[0] {
	case "up":
		vm, err := qemu.Up(ctx, qemu.Options{Name: *name, Bundle: *bundle})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "VM %s up in %v (pid %d); console: %s\n", vm.Name, vm.BootTime.Round(time.Millisecond), vm.PID, vm.Console)
		fmt.Fprintf(out, "reach it with:  --agent %s --mgmt %s   (tcp://%s for the TCP handoff)\n", vm.Agent, vm.Mgmt, vm.TCP)
		return nil
	case "down":
		vm, err := qemu.Load(dir)
		if err != nil {
			return fmt.Errorf("no VM %s: %w", *name, err)
		}
		if err := vm.Down(ctx, 20*time.Second); err != nil {
			return err
		}
		fmt.Fprintf(out, "VM %s down\n", vm.Name)
		return nil
	case "status":
		vm, err := qemu.Load(dir)
		if err != nil {
			return fmt.Errorf("no VM %s: %w", *name, err)
		}
		state := "stopped"
		if why, ok := vm.Panic(); ok && !vm.Running() {
			state = "stopped: the guest kernel panicked (" + why + ")"
		}
		if vm.Running() {
			state = fmt.Sprintf("running (pid %d, booted in %v)", vm.PID, vm.BootTime.Round(time.Millisecond))
		}
		fmt.Fprintf(out, "VM %s: %s\n  --agent %s --mgmt %s\n  console %s\n", vm.Name, state, vm.Agent, vm.Mgmt, vm.Console)
		return nil
	case "console":
		vm, err := qemu.Load(dir)
		if err != nil {
			return fmt.Errorf("no VM %s: %w", *name, err)
		}
		f, err := os.Open(vm.Console)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			if _, err := io.Copy(out, f); err != nil {
				return err
			}
			if !*follow || !vm.Running() {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return fmt.Errorf("qemu: unknown command %q", args[0])
}

func kvCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("kv: want get, put, del or scan")
	}
	var c common
	fs := flags("kv "+args[0], &c)
	ttl := fs.Duration("ttl", 0, "put: expire after this long")
	limit := fs.Int("limit", 100, "scan: the most pairs to list")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	want := map[string]int{"get": 1, "put": 2, "del": 1, "scan": -1}[args[0]]
	switch {
	case want == 0:
		return fmt.Errorf("kv: unknown command %q", args[0])
	case want > 0 && fs.NArg() != want:
		return fmt.Errorf("kv %s: want %d arguments", args[0], want)
	case want < 0 && fs.NArg() > 1:
		return fmt.Errorf("kv scan: want at most a PREFIX")
	}
	cl, err := dial(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	kv := cl.KV()
	switch args[0] {
	case "get":
		v, _, err := kv.Get(ctx, []byte(fs.Arg(0)), nil)
		if host.IsNotFound(err) {
			return fmt.Errorf("%s: not found", fs.Arg(0))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n", v)
	case "put":
		if err := kv.Put(ctx, []byte(fs.Arg(0)), []byte(fs.Arg(1)), host.PutOptions{TTL: *ttl}); err != nil {
			return err
		}
		fmt.Fprintln(out, "OK")
	case "del":
		ok, err := kv.Delete(ctx, []byte(fs.Arg(0)))
		if err != nil {
			return err
		}
		fmt.Fprintln(out, map[bool]string{true: "deleted", false: "not found"}[ok])
	case "scan":
		var cursor []byte
		n := 0
		for n < *limit {
			pairs, next, err := kv.Scan(ctx, []byte(fs.Arg(0)), cursor, min(*limit-n, 1000))
			if err != nil {
				return err
			}
			for _, p := range pairs {
				fmt.Fprintf(out, "%s\t%s\n", p.Key, p.Value)
			}
			n += len(pairs)
			if next == nil {
				break
			}
			cursor = next
		}
	}
	return nil
}

// checksumRails reads FILE, calibrates the host and agent rails, and lets
// the planner split the checksum between them; it prints the plan, the time
// achieved, and the single-rail answer to compare.
func checksumRails(ctx context.Context, c common, path string, out io.Writer) error {
	cl, err := dial(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	// Read the file into the window when it fits (the agent then reads it
	// in place), else into memory (staged to the agent in chunks).
	var data []byte
	where := "in the window"
	if buf, err := cl.Alloc(int(fi.Size())); err == nil && fi.Size() > 0 {
		defer cl.Free(buf)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.ReadFull(f, buf)
		f.Close()
		if err != nil {
			return err
		}
		data = buf
	} else if data, err = os.ReadFile(path); err != nil {
		return err
	} else {
		where = "staged through the window"
	}
	rails, err := cl.CalibrateChecksum(ctx, data)
	if err != nil {
		return err
	}
	t0 := time.Now()
	crc, plan, err := cl.ChecksumSplit(ctx, data, rails)
	took := time.Since(t0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "rails (calibrated now, on this file %s):\n", where)
	for _, r := range rails {
		fmt.Fprintf(out, "  %-5s %-10s alpha %-10v %.2f GB/s\n", r.Name, r.Kind, r.Alpha.Round(time.Nanosecond), r.Rate/1e9)
	}
	fmt.Fprintf(out, "plan: %s", plan.Explain())
	fmt.Fprintf(out, "%08x  %s  (%d bytes, split across rails in %v; predicted %v)\n", crc, path, len(data), took.Round(time.Microsecond), plan.Predicted.Round(time.Microsecond))
	if want := crc32c.Checksum(data); want != crc {
		return fmt.Errorf("MISMATCH: single-rail crc32c %08x", want)
	}
	fmt.Fprintf(out, "%08x  single rail (in-process): match\n", crc)
	return nil
}
