package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/dpu"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "hecd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if dpu.IsInit() {
		// Process 1 of a VM or DPU image: configured from the kernel
		// command line, never returns unless it cannot power off.
		return dpu.RunInit(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	}
	fs := flag.NewFlagSet("hecd", flag.ContinueOnError)
	var (
		configFile = fs.String("config", "", "TOML configuration file (flags override it)")
		shm        = fs.String("shm", dpu.DefaultShm, "shared-memory region file, or off")
		tcp        = fs.String("tcp", dpu.DefaultTCP, "TCP handoff listener address, or off")
		mgmt       = fs.String("mgmt", dpu.DefaultMgmt, "management HTTP address, or off")
		resp       = fs.String("resp", dpu.DefaultRESP, "Redis-protocol (kv) address, or off")
		udp        = fs.String("udp", dpu.DefaultUDP, "UDP GET (kv) address, or off")
		stateDir   = fs.String("state-dir", "", "state directory (default $XDG_STATE_HOME/hec or ~/.local/state/hec)")
		regionSize = fs.Uint64("region-size", dpu.DefaultRegionSize, "region size in bytes")
		qps        = fs.Int("queue-pairs", 16, "queue pairs in the region")
		entries    = fs.Int("ring-entries", 256, "descriptors per ring (power of two)")
		workers    = fs.Int("workers", 0, "handler worker goroutines (default GOMAXPROCS)")
		checkPIDs  = fs.Bool("check-pids", true, "fence queue pairs whose holder pid is gone (local emulation only)")
		doorbell   = fs.Bool("doorbell", true, "sleep on a futex doorbell hosts ring when idle (hosts share this kernel)")
		durability = fs.String("durability", "sync", "kv writes acknowledged once on disk (sync) or in memory (async)")
		respPass   = fs.String("resp-password", "", "password RESP clients must AUTH with (default none)")
		nodeID     = fs.Uint("node-id", 0, "this agent's id in its cluster (peer layer)")
		peerAddr   = fs.String("peer", "off", "address other agents reach this one on, or off")
		peers      = fs.String("peers", "", "static members, ID@HOST:PORT,... (peer layer)")
		keyFile    = fs.String("cluster-key-file", "", "file holding the cluster key (peer layer)")
		membership = fs.String("membership", "static", "static (--peers) or etcd://HOST:PORT")
		cluster    = fs.String("cluster", "hec", "cluster name (the etcd key prefix)")
		profile    = fs.String("dpu-profile", "none", "behave like a DPU's Arm side: bf2, bf3 or none (own cores, CPU quota, no AVX)")
		xdpIface   = fs.String("xdp", "off", "interface to attach the XDP fast path to (counters, allow-list, samples, hot GETs), or off")
		xdpMode    = fs.String("xdp-mode", "auto", "XDP attach mode: auto (native, else generic), native or generic")
		xdpReplace = fs.Bool("xdp-replace", false, "replace an XDP program on the interface that hecd did not attach")
		xdpPin     = fs.String("xdp-pin-dir", "", "bpffs directory for the counters and allow-list (default /sys/fs/bpf/hec/nsINODE-IFACE), or off")
		aclDefault = fs.String("acl-default", "allow", "sources the allow-list does not name, on the service ports: allow or deny")
		hotKeys    = fs.Int("hot-keys", 1024, "keys whose UDP GETs XDP answers (0: off, at most 4096)")
		hotMaxVal  = fs.Int("hot-max-value", 512, "largest value held for XDP, in bytes")
		hotMinRate = fs.Float64("hot-min-rate", 100, "GETs per second reaching user space that make a key hot")
		xdpPass    = fs.String("xdp-pass", "", "attach a program that passes every packet to IFACE natively, then exit (the far end of a veth needs one for XDP_TX: test clusters)")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		version    = fs.Bool("version", false, "print the version and exit")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *xdpPass != "" {
		if err := bpf.AttachPass(*xdpPass); err != nil {
			return err
		}
		fmt.Printf("hecd: a pass-everything XDP program is on %s (ip link set dev %s xdp off removes it)\n", *xdpPass, *xdpPass)
		return nil
	}
	if *version {
		fmt.Println("hecd", dpu.Version)
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var cfg dpu.Config
	if *configFile != "" {
		if err := dpu.LoadConfigFile(*configFile, &cfg); err != nil {
			return err
		}
	}
	// Flags given on the command line override the file.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "shm":
			cfg.Shm = *shm
		case "tcp":
			cfg.TCP = *tcp
		case "mgmt":
			cfg.Mgmt = *mgmt
		case "resp":
			cfg.RESP = *resp
		case "udp":
			cfg.UDP = *udp
		case "state-dir":
			cfg.StateDir = *stateDir
		case "region-size":
			cfg.RegionSize = *regionSize
		case "queue-pairs":
			cfg.QueuePairs = *qps
		case "ring-entries":
			cfg.RingEntries = *entries
		case "workers":
			cfg.Workers = *workers
		case "check-pids":
			cfg.CheckPIDs = checkPIDs
		case "doorbell":
			cfg.Doorbell = doorbell
		case "durability":
			cfg.KVDurability = *durability
		case "resp-password":
			cfg.RESPPassword = *respPass
		case "dpu-profile":
			cfg.DPUProfile = *profile
		case "node-id":
			cfg.NodeID = uint32(*nodeID)
		case "peer":
			cfg.Peer = *peerAddr
		case "peers":
			cfg.Peers = []string{*peers}
		case "cluster-key-file":
			cfg.ClusterKeyFile = *keyFile
		case "membership":
			cfg.Membership = *membership
		case "cluster":
			cfg.Cluster = *cluster
		case "xdp":
			cfg.XDP = *xdpIface
		case "xdp-mode":
			cfg.XDPMode = *xdpMode
		case "xdp-replace":
			cfg.XDPReplace = *xdpReplace
		case "xdp-pin-dir":
			cfg.XDPPinDir = *xdpPin
		case "acl-default":
			cfg.ACLDefault = *aclDefault
		case "hot-keys":
			cfg.HotKeys = hotKeys
		case "hot-max-value":
			cfg.HotMaxValue = *hotMaxVal
		case "hot-min-rate":
			cfg.HotMinRate = *hotMinRate
		}
	})
	prof, err := dpu.ParseProfile(cfg.DPUProfile)
	if err != nil {
		return err
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
	agent, err := dpu.New(cfg, log)
	if err != nil {
		return err
	}
	agent.SetProfile(applied)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.Run(ctx)
}
