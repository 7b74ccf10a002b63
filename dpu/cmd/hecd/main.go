package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/dpu/pid1"
	"github.com/hecsys/hec/dpu/profile"
	"github.com/hecsys/hec/dpu/slots"
)

func main() {
	if pid1.IsInit() {
		// Process 1 of a VM or DPU image: it supervises the agent, run as
		// its child, and never returns unless it cannot power off.
		err := pid1.Run(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		fmt.Fprintln(os.Stderr, "hecd (pid 1):", err)
		select {} // process 1 must not exit
	}
	run := run
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "supervise" {
		run, args = supervise, args[1:]
	}
	if err := run(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "hecd:", oneLine(err))
		os.Exit(1)
	}
}

// oneLine keeps an error on one line: what is printed on failure is one
// line naming the flag and the cause.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// hecdFlags are hecd's flags that are not configuration.
type hecdFlags struct {
	logLevel      string
	version       bool
	xdpPass       string
	kernelCmdline bool
}

func (hf *hecdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&hf.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&hf.version, "version", false, "print the version and exit")
	fs.StringVar(&hf.xdpPass, "xdp-pass", "", "attach a program that passes every packet to IFACE natively, then exit (the far end of a veth needs one for XDP_TX: test clusters)")
	fs.BoolVar(&hf.kernelCmdline, "kernel-cmdline", false, "also apply hec.NAME=VALUE parameters of /proc/cmdline as --NAME VALUE (the agent under process 1)")
}

func run(args []string) error {
	var hf hecdFlags
	cfg, fs, err := dpu.ParseArgs("hecd", args, hf.register)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stdout)
		fmt.Println("usage: hecd [flags]   (the HEC agent; see the README for the services it runs)\n       hecd supervise [loader flags] -- [hecd flags]   (the agent run from its A/B slots: hecd supervise -h)")
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags start with -)", fs.Args())
	}
	var log *slog.Logger
	setLog := func() error {
		var level slog.Level
		if err := level.UnmarshalText([]byte(hf.logLevel)); err != nil {
			return fmt.Errorf("--log-level %q: want debug, info, warn or error", hf.logLevel)
		}
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		return nil
	}
	if err := setLog(); err != nil {
		return err
	}
	if hf.kernelCmdline {
		applyCmdline(fs, log)
		if err := setLog(); err != nil {
			return err
		}
	}
	if hf.version {
		fmt.Println("hecd", dpu.Version)
		return nil
	}
	if hf.xdpPass != "" {
		if err := bpf.AttachPass(hf.xdpPass); err != nil {
			return fmt.Errorf("--xdp-pass %s: %w", hf.xdpPass, err)
		}
		fmt.Printf("hecd: a pass-everything XDP program is on %s (ip link set dev %s xdp off removes it)\n", hf.xdpPass, hf.xdpPass)
		return nil
	}
	prof, err := profile.Parse(cfg.Agent.DPUProfile)
	if err != nil {
		return fmt.Errorf("--dpu-profile: %w", err)
	}
	// A profile's CPU features are fixed at process start: run again with
	// them (same pid), then pin and cap before the agent sizes its pools.
	if err := prof.Reexec(); err != nil {
		return err
	}
	applied, err := prof.Apply()
	if err != nil {
		return err
	}
	defer applied.Release()
	if prof.Name != "none" {
		log.Info("dpu profile", "profile", prof.Name, "cpus", applied.CPUs, "gomaxprocs", applied.GOMAXPROCS,
			"quota_cores", applied.Quota, "simd_off", applied.SIMDOff, "note", applied.QuotaNote)
	}
	agent, err := dpu.New(*cfg, log)
	if err != nil {
		return err
	}
	if prof.Name != "none" {
		agent.SetProfile(applied.Status())
	}
	if os.Getenv(pid1.ChildEnv) != "" && os.Getppid() == 1 {
		// POST /v1/poweroff: process 1 stops us, syncs and powers off.
		agent.PowerOff = func() { syscall.Kill(1, syscall.SIGTERM) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.Run(ctx)
}

// applyCmdline sets flags from hec.NAME=VALUE parameters of the kernel
// command line (NAME's _ as -), after the command line's own flags.
func applyCmdline(fs *flag.FlagSet, log *slog.Logger) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		log.Warn("kernel command line", "err", err)
		return
	}
	for _, ignored := range setFromCmdline(fs, string(b)) {
		log.Warn("kernel command line: parameter ignored", "param", ignored.param, "err", ignored.err)
	}
}

// cmdlineParam is a hec.* parameter the agent could not take as a flag.
type cmdlineParam struct {
	param string
	err   error
}

// setFromCmdline sets fs's flags from cmdline's hec.NAME=VALUE parameters,
// leaving process 1's own (pid1.Params) alone, and returns those that name
// no flag or carry a bad value.
func setFromCmdline(fs *flag.FlagSet, cmdline string) []cmdlineParam {
	var ignored []cmdlineParam
	for _, f := range strings.Fields(cmdline) {
		k, v, ok := strings.Cut(f, "=")
		name, isHec := strings.CutPrefix(k, "hec.")
		if !ok || !isHec || slices.Contains(pid1.Params, k) {
			continue
		}
		flagName := strings.ReplaceAll(name, "_", "-")
		if flagName == "loglevel" {
			flagName = "log-level"
		}
		if err := fs.Set(flagName, v); err != nil {
			ignored = append(ignored, cmdlineParam{f, err})
		}
	}
	return ignored
}

// supervise is `hecd supervise [loader flags] -- [agent flags]`: the
// loader as a service (package pid1's Supervise), for an agent on a DPU's
// Linux or a host. The agent flags are checked here, as hecd would, and
// tell the loader where the state (the slots) and the management API are.
func supervise(args []string) error {
	fs := flag.NewFlagSet("hecd supervise", flag.ContinueOnError)
	var o pid1.LoaderOptions
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.TrustedKey, "trusted-key", "", "hex ed25519 public key bundles must be signed with, installed into the state when it has none")
	fs.IntVar(&o.Tries, "tries", slots.DefaultTries, "starts of a new slot before falling back to the committed one")
	fs.DurationVar(&o.Gate, "gate", pid1.DefaultGate, "how long a new slot has to become ready (/readyz) before it is given up")
	fs.StringVar(&o.ProbeCert, "probe-cert", "", "client certificate (PEM) the loader's probes present to an agent with --mgmt-client-ca and no token")
	fs.StringVar(&o.ProbeKey, "probe-key", "", "the key of --probe-cert (PEM)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hecd supervise [flags] -- [hecd flags]   (runs the agent from its A/B slots, commits or rolls back updates)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	o.Args = fs.Args()
	var hf hecdFlags
	cfg, _, err := dpu.ParseArgs("hecd", o.Args, hf.register)
	if err != nil {
		return fmt.Errorf("agent flags: %w", err)
	}
	a := cfg.Agent
	switch {
	case a.Mgmt == dpu.Off:
		return errors.New("agent flags: --mgmt off: the loader needs the management API to see the agent ready")
	case a.MgmtClientCA != "" && a.TokenFile == "" && o.ProbeCert == "" && !slices.Contains(strings.Split(a.MgmtOpen, ","), "healthz"):
		return errors.New("agent flags: --mgmt-client-ca with no --token-file: the loader's probes of /readyz and /healthz need a way in: --probe-cert and --probe-key (a client certificate that CA signed), a --token-file, or --mgmt-open healthz")
	}
	o.StateDir, o.TokenFile, o.MgmtCert = a.StateDir, a.TokenFile, a.MgmtCert
	o.Mgmt, err = loopback(a.Mgmt)
	if err != nil {
		return fmt.Errorf("agent flags: --mgmt %s: %w", a.Mgmt, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("loader", true)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return pid1.Supervise(ctx, log, o)
}

// loopback is the address to reach a listener on addr from this machine.
func loopback(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
